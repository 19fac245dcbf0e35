/*
 * tokenizer.h — byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json.
 *
 * Supported pipeline (anything else is refused at load with INK_E_UNSUPPORTED, naming the file
 * and the field): normalizer null; pre_tokenizer Sequence[Split{Regex, Isolated, invert false},
 * ByteLevel{add_prefix_space false, use_regex false}] (or a lone ByteLevel with use_regex false
 * after such a Split); model BPE (merges as "a b" strings or [a, b] pairs, ignore_merges honoured,
 * no dropout, no byte_fallback, no subword prefix/suffix); decoder ByteLevel; post_processor null
 * or ByteLevel (adds no tokens); added tokens without lstrip/rstrip/single_word.
 *
 * Encoding
 *   1. Added tokens are matched leftmost-longest as exact strings: non-special ones always,
 *      special ones only with INK_TOK_SPECIAL. Without it a special spelling such as
 *      "<|end_message|>" is ordinary text (prompt-injection safe).
 *   2. Each gap is split into valid UTF-8 runs; bytes that are not valid UTF-8 become their
 *      single-byte tokens (so decode(encode(b)) == b for any bytes b).
 *   3. Each run is split by the Split regex (PCRE2, UTF + UCP + JIT; `\s`/`\S` are rewritten to the
 *      Unicode White_Space set, which excludes U+180E as HF does), then every piece is looked up
 *      whole (ignore_merges) and otherwise merged by rank with an O(n log n) heap.
 *   PCRE2 carries the Unicode tables of its build (14.0 on Debian 12); HF tokenizers 0.23 uses
 *   Unicode 16: text with code points whose category changed in 15.0–16.0 may split differently.
 *
 * Ownership and threads: an ink_tokenizer is immutable after ink_tokenizer_open; any number of
 * threads may encode / decode with it at once (every call keeps its scratch state on its own).
 * An ink_detok (streaming decoder) belongs to one thread at a time. Pieces returned by
 * ink_tokenizer_piece are borrowed and live as long as the tokenizer.
 */
#ifndef INK_TOK_TOKENIZER_H
#define INK_TOK_TOKENIZER_H

#include "inkling.h"

#include <stddef.h>
#include <stdint.h>

typedef struct ink_tokenizer ink_tokenizer;

/* Growable id array. Zero-initialise ({0}) before first use; free the ids with ink_tokens_free.
 * The caller owns it; the tokenizer only appends to it. */
typedef struct ink_tokens {
    int32_t *ids;
    size_t n, cap;
} ink_tokens;

void ink_tokens_free(ink_tokens *v); /* frees v->ids and zeroes *v; NULL is a no-op */
/* Appends one id (grows the array). INK_E_NOMEM on failure, v unchanged. */
int ink_tokens_push(ink_tokens *v, int32_t id, ink_err *err);

enum {
    INK_TOK_SPECIAL = 1, /* encode: match special added tokens (e.g. "<|endoftext|>") */
};
enum {
    INK_DECODE_SKIP_SPECIAL = 1, /* decode: drop special added tokens */
    INK_DECODE_LOSSY = 2,        /* decode: replace invalid UTF-8 by U+FFFD (as HF does) */
};

/* Opens DIR/tokenizer.json (+ DIR/tokenizer_config.json when present). Caller frees *out. */
int ink_tokenizer_open(ink_tokenizer **out, const char *dir, ink_err *err);
/* Same, from explicit paths; config_path may be NULL. */
int ink_tokenizer_open_files(ink_tokenizer **out, const char *json_path, const char *config_path,
                             ink_err *err);
/* Same, from a JSON text in memory (`name` is used in error messages). */
int ink_tokenizer_open_mem(ink_tokenizer **out, const char *json, size_t len, const char *name,
                           ink_err *err);
void ink_tokenizer_free(ink_tokenizer *t);

/* Size of the tokenizer vocabulary: 1 + the highest id (200,058 on Inkling). The model's
 * embedding may have more rows; ids >= this value must never be sampled. */
int ink_tokenizer_n_vocab(const ink_tokenizer *t);
/* Number of BPE merges loaded, and the model_max_length of tokenizer_config.json (0 if none). */
size_t ink_tokenizer_n_merges(const ink_tokenizer *t);
int64_t ink_tokenizer_model_max_length(const ink_tokenizer *t);

/* Appends the ids of text[0..len) to v (text need not be NUL-terminated or valid UTF-8).
 * On error v->n is unchanged. flags: INK_TOK_SPECIAL or 0. */
int ink_tokenizer_encode(const ink_tokenizer *t, const char *text, size_t len, int flags,
                         ink_tokens *v, ink_err *err);
/* Encodes into a caller buffer of `cap` ids. *n_needed is always set to the number of ids the
 * text encodes to; when it exceeds cap, min(cap, n) ids are written and INK_E_INVAL returned. */
int ink_tokenizer_encode_buf(const ink_tokenizer *t, const char *text, size_t len, int flags,
                             int32_t *ids, size_t cap, size_t *n_needed, ink_err *err);

/* Decodes ids to bytes. *out is malloc'd, NUL-terminated (*out_len excludes the NUL); caller
 * free()s it. Ids outside [0, n_vocab) give INK_E_INVAL. flags: INK_DECODE_*. */
int ink_tokenizer_decode(const ink_tokenizer *t, const int32_t *ids, size_t n, int flags, char **out,
                         size_t *out_len, ink_err *err);

/* Bytes of token `id` (decoded, not byte-level spelled; an added token's content). Borrowed,
 * NUL-terminated for convenience (may contain NUL bytes: use *len). NULL if id is not a token. */
const char *ink_tokenizer_piece(const ink_tokenizer *t, int32_t id, size_t *len);
/* 1 if id is a special added token, 0 otherwise. */
int ink_tokenizer_is_special(const ink_tokenizer *t, int32_t id);
/* Id of the added token whose content is exactly `s`, or -1. */
int32_t ink_tokenizer_special_id(const ink_tokenizer *t, const char *s);
/* Id of the token whose bytes are exactly s[0..len) (ordinary vocab first, then added), or -1. */
int32_t ink_tokenizer_token_id(const ink_tokenizer *t, const char *s, size_t len);
/* Longest piece in bytes (sizes buffers for streaming). */
size_t ink_tokenizer_max_piece_len(const ink_tokenizer *t);

/* Streaming decoder: feed ids one at a time and get only complete UTF-8 text; an incomplete
 * multi-byte sequence is held back until the bytes that finish it arrive; bytes that can never
 * form a valid sequence come out as U+FFFD (one per maximal invalid subpart, like HF's lossy
 * decode). The tokenizer must outlive it. */
typedef struct ink_detok ink_detok;
int ink_detok_new(ink_detok **out, const ink_tokenizer *t, int flags, ink_err *err);
void ink_detok_free(ink_detok *d);
/* Feeds one id; *text / *len receive the newly complete text (borrowed until the next call on d;
 * may be empty). INK_E_INVAL for an unknown id (state unchanged). */
int ink_detok_feed(ink_detok *d, int32_t id, const char **text, size_t *len, ink_err *err);
/* Ends the stream: a held incomplete tail comes out as U+FFFD. Resets d for reuse. */
void ink_detok_flush(ink_detok *d, const char **text, size_t *len);
/* Number of bytes held back (0..3). */
size_t ink_detok_pending(const ink_detok *d);

/* UTF-8 helpers shared with the chat code. Length of the longest valid UTF-8 prefix of s. */
size_t ink_utf8_valid_prefix(const unsigned char *s, size_t n);

#endif
