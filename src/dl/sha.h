/* sha.h — SHA-256 and SHA-1 (FIPS 180-4), streaming. Used to verify downloads: the LFS sha256 of
 * large files and the git blob id (sha1 of "blob <size>\0" + content) of small git-stored files.
 * Depends on libc only. */
#ifndef INK_DL_SHA_H
#define INK_DL_SHA_H

#include <stddef.h>
#include <stdint.h>

typedef struct ink_sha256 {
    uint32_t h[8];
    uint64_t len;       /* bytes hashed so far */
    uint8_t buf[64];
    size_t nbuf;
} ink_sha256;

typedef struct ink_sha1 {
    uint32_t h[5];
    uint64_t len;
    uint8_t buf[64];
    size_t nbuf;
} ink_sha1;

void ink_sha256_init(ink_sha256 *s);
void ink_sha256_update(ink_sha256 *s, const void *data, size_t n);
void ink_sha256_final(ink_sha256 *s, uint8_t out[32]);

void ink_sha1_init(ink_sha1 *s);
void ink_sha1_update(ink_sha1 *s, const void *data, size_t n);
void ink_sha1_final(ink_sha1 *s, uint8_t out[20]);

/* Writes 2*n lowercase hex digits and a NUL into out (size >= 2*n+1). */
void ink_hex(const uint8_t *in, size_t n, char *out);

#endif
