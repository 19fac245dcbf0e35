/* fuzz.h — libFuzzer entry points of inkling.c and the helpers they share.
 *
 * Each target is a plain function taking one input; fuzz/driver.c turns one of them into
 * LLVMFuzzerTestOneInput (make fuzz), tests/test_fuzz_regressions.c replays the committed inputs
 * of fuzz/regressions/<target>/ and the seeds of fuzz/corpus/<target>/ through the same functions
 * (make test). A target returns 0; a violated property abort()s with a message on stderr.
 * Targets run from the repository root (the encode and chat targets read tests/data/tok/). */
#ifndef INK_FUZZ_H
#define INK_FUZZ_H

#include <stddef.h>
#include <stdint.h>

#include "tok/tokenizer.h"

int ink_fuzz_safetensors(const uint8_t *data, size_t n); /* ink_st_open / ink_st_map on one file */
int ink_fuzz_tdir(const uint8_t *data, size_t n);        /* a model directory: index, shards, config */
int ink_fuzz_config(const uint8_t *data, size_t n);      /* ink_config_parse */
int ink_fuzz_tokenizer(const uint8_t *data, size_t n);   /* ink_tokenizer_open_mem + use */
int ink_fuzz_encode(const uint8_t *data, size_t n);      /* encode / decode on the test tokenizer */
int ink_fuzz_chat(const uint8_t *data, size_t n);        /* ink_chat_render_json + ink_chat_parse */
int ink_fuzz_hub(const uint8_t *data, size_t n);         /* the Hub listing parser + file selection */
int ink_fuzz_server(const uint8_t *data, size_t n);      /* inkling serve: request bodies */
int ink_fuzz_serverout(const uint8_t *data, size_t n);  /* inkling serve: generated ids -> response parts */

typedef struct ink_fuzz_target {
    const char *name;
    int (*fn)(const uint8_t *data, size_t n);
} ink_fuzz_target;
/* Every target, NULL-terminated. */
extern const ink_fuzz_target ink_fuzz_targets[];

/* A private directory for this process (created once, removed at exit). */
const char *fz_tmpdir(void);
/* Writes data to path (truncating). 0 or -1. */
int fz_write(const char *path, const void *data, size_t n);
/* Removes every plain entry of dir (not recursive). */
void fz_clear_dir(const char *dir);
/* Writes a safetensors file: if data starts with '{', the header is data up to the first NUL
 * byte (or all of it) and the rest is the data buffer, with the 8-byte length prefix computed;
 * otherwise the bytes are written as they are. */
int fz_write_st(const char *path, const uint8_t *data, size_t n);
/* The tokenizer of tests/data/tok (INK_FUZZ_TOKDIR overrides the directory), loaded once. Aborts
 * when it cannot be loaded. */
const ink_tokenizer *fz_test_tokenizer(void);
/* Prints a message and aborts (a property did not hold). */
void fz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#endif
