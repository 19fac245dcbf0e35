/* tok_int.h — the tokenizer's internals shared by its files (not public):
 *   tokenizer.c   loading and validating tokenizer.json, the id / merge tables, accessors
 *   tok_encode.c  byte-level BPE encoding (pre-tokenizer regex, added tokens, merge heap)
 *   tok_decode.c  UTF-8 checks and lossy conversion, decoding and the streaming detokenizer
 * The tables belong to the ink_tokenizer (tokenizer.c frees them); encode and decode only read. */
#ifndef INK_TOK_INT_H
#define INK_TOK_INT_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#include "tok/tokenizer.h"

enum { ENT_NONE = 0, ENT_VOCAB = 1, ENT_ADDED = 2 };

typedef struct tok_ent {
    uint32_t off, len;
    uint8_t kind;    /* ENT_* */
    uint8_t special; /* added token marked special */
} tok_ent;

/* Token ids are below 2^24 (config.json's vocab_size limit): the id table is sized by the largest id. */
#define TOK_MAX_ID (1 << 24)

typedef struct added_tok {
    int32_t id;
    uint32_t off, len;
    int special;
} added_tok;

struct ink_tokenizer {
    int n_vocab;
    tok_ent *ent;
    char *arena;
    size_t arena_len, arena_cap;
    /* ordinary vocab: open addressing over ids, keyed by the token bytes */
    int32_t *vh;
    size_t vh_mask;
    /* merges: open addressing, key = left << 32 | right */
    uint64_t *mk;
    uint32_t *mrank;
    int32_t *mid;
    size_t mh_mask, n_merges;
    int32_t byte_id[256];
    int ignore_merges;
    pcre2_code *re;
    int jit;
    /* added tokens sorted by (first byte, length descending); bucket [first[c], first[c+1]) */
    added_tok *added;
    size_t n_added;
    uint32_t first[257];
    int any_nonspecial;
    size_t max_piece;
    int64_t model_max_length;
};

/* Vocabulary lookup by token bytes: the id, or -1. */
int32_t tok_vocab_find(const ink_tokenizer *t, const unsigned char *s, size_t n);
/* Merge lookup for the pair (l, r): 1 and its rank and result id, or 0. */
int tok_merge_find(const ink_tokenizer *t, int32_t l, int32_t r, uint32_t *rank, int32_t *id);

#endif
