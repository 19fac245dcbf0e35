/* sha.c — SHA-256 and SHA-1 through libcrypto's EVP interface (OpenSSL's assembly, SHA-NI where
 * the CPU has it). The streams share one implementation, parameterised by the EVP_MD. */
#include "dl/sha.h"

#include <openssl/evp.h>
#include <string.h>

static void md_init(void **ctx, int *failed, const EVP_MD *md)
{
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    if (c && EVP_DigestInit_ex(c, md, NULL) != 1) {
        EVP_MD_CTX_free(c);
        c = NULL;
    }
    *ctx = c;
    *failed = c == NULL;
}

static void md_update(void *ctx, int *failed, const void *data, size_t n)
{
    if (*failed || n == 0) return;
    if (EVP_DigestUpdate(ctx, data, n) != 1) *failed = 1;
}

static int md_final(void **ctx, int *failed, uint8_t *out, size_t n)
{
    unsigned int got = 0;
    int ok = !*failed && EVP_DigestFinal_ex(*ctx, out, &got) == 1 && got == n;
    EVP_MD_CTX_free(*ctx);
    *ctx = NULL;
    if (ok) return 0;
    memset(out, 0, n);
    *failed = 1;
    return -1;
}

static void md_free(void **ctx)
{
    EVP_MD_CTX_free(*ctx); /* NULL-safe */
    *ctx = NULL;
}

void ink_sha256_init(ink_sha256 *s) { md_init(&s->ctx, &s->failed, EVP_sha256()); }
void ink_sha256_update(ink_sha256 *s, const void *data, size_t n) { md_update(s->ctx, &s->failed, data, n); }
int ink_sha256_final(ink_sha256 *s, uint8_t out[32]) { return md_final(&s->ctx, &s->failed, out, 32); }
void ink_sha256_free(ink_sha256 *s) { md_free(&s->ctx); }

void ink_sha1_init(ink_sha1 *s) { md_init(&s->ctx, &s->failed, EVP_sha1()); }
void ink_sha1_update(ink_sha1 *s, const void *data, size_t n) { md_update(s->ctx, &s->failed, data, n); }
int ink_sha1_final(ink_sha1 *s, uint8_t out[20]) { return md_final(&s->ctx, &s->failed, out, 20); }
void ink_sha1_free(ink_sha1 *s) { md_free(&s->ctx); }

void ink_hex(const uint8_t *in, size_t n, char *out)
{
    static const char dig[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = dig[in[i] >> 4];
        out[2 * i + 1] = dig[in[i] & 15];
    }
    out[2 * n] = '\0';
}
