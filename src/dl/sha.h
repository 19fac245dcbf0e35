/* sha.h — SHA-256 and SHA-1 (FIPS 180-4), streaming, through OpenSSL's libcrypto (EVP). Used to
 * verify downloads: the LFS sha256 of large files and the git blob id (sha1 of "blob <size>\0" +
 * content) of small git-stored files. Depends on libcrypto (libssl-dev).
 *
 * Ownership: init allocates a libcrypto context that final releases; a stream abandoned before
 * final is released with ink_sha*_free (NULL-safe, idempotent; also fine after final). Calling init
 * on a stream that holds a context (init without final or free) leaks it. If libcrypto cannot
 * allocate or run the digest, the stream is marked failed: update does nothing and final writes
 * zeros and returns -1. */
#ifndef INK_DL_SHA_H
#define INK_DL_SHA_H

#include <stddef.h>
#include <stdint.h>

typedef struct ink_sha256 {
    void *ctx;   /* EVP_MD_CTX *, owned */
    int failed;
} ink_sha256;

typedef struct ink_sha1 {
    void *ctx;   /* EVP_MD_CTX *, owned */
    int failed;
} ink_sha1;

void ink_sha256_init(ink_sha256 *s);
void ink_sha256_update(ink_sha256 *s, const void *data, size_t n);
/* 0, or -1 when the stream failed (out is then all zeros). Releases the context. */
int ink_sha256_final(ink_sha256 *s, uint8_t out[32]);
void ink_sha256_free(ink_sha256 *s);

void ink_sha1_init(ink_sha1 *s);
void ink_sha1_update(ink_sha1 *s, const void *data, size_t n);
int ink_sha1_final(ink_sha1 *s, uint8_t out[20]);
void ink_sha1_free(ink_sha1 *s);

/* Writes 2*n lowercase hex digits and a NUL into out (size >= 2*n+1). */
void ink_hex(const uint8_t *in, size_t n, char *out);

#endif
