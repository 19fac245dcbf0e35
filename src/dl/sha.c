/* sha.c — SHA-256 and SHA-1 written from FIPS 180-4. Depends on libc only. */
#include "dl/sha.h"

#include <string.h>

static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
static uint32_t rotl(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

static uint32_t load_be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static void store_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* ---- SHA-256 ----------------------------------------------------------------------------- */

static const uint32_t K256[64] = {
    0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u,
    0xab1c5ed5u, 0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu,
    0x9bdc06a7u, 0xc19bf174u, 0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu,
    0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau, 0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u,
    0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u, 0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu,
    0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u, 0xa2bfe8a1u, 0xa81a664bu,
    0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u, 0x19a4c116u,
    0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
    0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u,
    0xc67178f2u,
};

static void sha256_block(uint32_t h[8], const uint8_t *p)
{
    uint32_t w[64];
    for (int t = 0; t < 16; t++) w[t] = load_be32(p + 4 * t);
    for (int t = 16; t < 64; t++) {
        uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
        uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
        w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int t = 0; t < 64; t++) {
        uint32_t S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
        uint32_t ch = (e & f) ^ (~e & g);
        uint32_t t1 = k + S1 + ch + K256[t] + w[t];
        uint32_t S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
        uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
        uint32_t t2 = S0 + maj;
        k = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d;
    h[4] += e; h[5] += f; h[6] += g; h[7] += k;
}

void ink_sha256_init(ink_sha256 *s)
{
    static const uint32_t iv[8] = {0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au,
                                   0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u};
    memcpy(s->h, iv, sizeof iv);
    s->len = 0;
    s->nbuf = 0;
}

void ink_sha256_update(ink_sha256 *s, const void *data, size_t n)
{
    const uint8_t *p = data;
    s->len += n;
    if (s->nbuf) {
        size_t take = 64 - s->nbuf < n ? 64 - s->nbuf : n;
        memcpy(s->buf + s->nbuf, p, take);
        s->nbuf += take;
        p += take;
        n -= take;
        if (s->nbuf < 64) return;
        sha256_block(s->h, s->buf);
        s->nbuf = 0;
    }
    while (n >= 64) {
        sha256_block(s->h, p);
        p += 64;
        n -= 64;
    }
    memcpy(s->buf, p, n);
    s->nbuf = n;
}

/* Shared Merkle–Damgård padding: 0x80, zeros, 64-bit big-endian bit length. */
static void md_pad(uint8_t buf[64], size_t *nbuf, uint64_t len, void (*block)(void *, const uint8_t *),
                   void *state)
{
    uint64_t bits = len * 8;
    buf[(*nbuf)++] = 0x80;
    if (*nbuf > 56) {
        memset(buf + *nbuf, 0, 64 - *nbuf);
        block(state, buf);
        *nbuf = 0;
    }
    memset(buf + *nbuf, 0, 56 - *nbuf);
    store_be32(buf + 56, (uint32_t)(bits >> 32));
    store_be32(buf + 60, (uint32_t)bits);
    block(state, buf);
    *nbuf = 0;
}

static void sha256_block_cb(void *st, const uint8_t *p) { sha256_block(st, p); }

void ink_sha256_final(ink_sha256 *s, uint8_t out[32])
{
    md_pad(s->buf, &s->nbuf, s->len, sha256_block_cb, s->h);
    for (int i = 0; i < 8; i++) store_be32(out + 4 * i, s->h[i]);
}

/* ---- SHA-1 ------------------------------------------------------------------------------- */

static void sha1_block(uint32_t h[5], const uint8_t *p)
{
    uint32_t w[80];
    for (int t = 0; t < 16; t++) w[t] = load_be32(p + 4 * t);
    for (int t = 16; t < 80; t++) w[t] = rotl(w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16], 1);
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int t = 0; t < 80; t++) {
        uint32_t f, k;
        if (t < 20) {
            f = (b & c) | (~b & d);
            k = 0x5a827999u;
        } else if (t < 40) {
            f = b ^ c ^ d;
            k = 0x6ed9eba1u;
        } else if (t < 60) {
            f = (b & c) | (b & d) | (c & d);
            k = 0x8f1bbcdcu;
        } else {
            f = b ^ c ^ d;
            k = 0xca62c1d6u;
        }
        uint32_t tmp = rotl(a, 5) + f + e + k + w[t];
        e = d;
        d = c;
        c = rotl(b, 30);
        b = a;
        a = tmp;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e;
}

void ink_sha1_init(ink_sha1 *s)
{
    static const uint32_t iv[5] = {0x67452301u, 0xefcdab89u, 0x98badcfeu, 0x10325476u,
                                   0xc3d2e1f0u};
    memcpy(s->h, iv, sizeof iv);
    s->len = 0;
    s->nbuf = 0;
}

void ink_sha1_update(ink_sha1 *s, const void *data, size_t n)
{
    const uint8_t *p = data;
    s->len += n;
    if (s->nbuf) {
        size_t take = 64 - s->nbuf < n ? 64 - s->nbuf : n;
        memcpy(s->buf + s->nbuf, p, take);
        s->nbuf += take;
        p += take;
        n -= take;
        if (s->nbuf < 64) return;
        sha1_block(s->h, s->buf);
        s->nbuf = 0;
    }
    while (n >= 64) {
        sha1_block(s->h, p);
        p += 64;
        n -= 64;
    }
    memcpy(s->buf, p, n);
    s->nbuf = n;
}

static void sha1_block_cb(void *st, const uint8_t *p) { sha1_block(st, p); }

void ink_sha1_final(ink_sha1 *s, uint8_t out[20])
{
    md_pad(s->buf, &s->nbuf, s->len, sha1_block_cb, s->h);
    for (int i = 0; i < 5; i++) store_be32(out + 4 * i, s->h[i]);
}

void ink_hex(const uint8_t *in, size_t n, char *out)
{
    static const char dig[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = dig[in[i] >> 4];
        out[2 * i + 1] = dig[in[i] & 15];
    }
    out[2 * n] = '\0';
}
