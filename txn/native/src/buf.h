/* Growable byte buffers and big-endian integers (header-only helpers). */
#ifndef TXN_NATIVE_BUF_H
#define TXN_NATIVE_BUF_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    unsigned char *data;
    size_t len;
    size_t cap;
} Buf;

/* Room for n more bytes; 0, or -1 when memory ran out (the buffer is unchanged). */
static inline int buf_reserve(Buf *b, size_t n) {
    if (b->len + n <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n) cap *= 2;
    unsigned char *p = realloc(b->data, cap);
    if (p == NULL) return -1;
    b->data = p;
    b->cap = cap;
    return 0;
}

static inline void buf_free(Buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* The writers below assume the caller reserved room (buf_reserve) beforehand. */
static inline void put_raw(Buf *b, const void *p, size_t n) {
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

static inline void put_u8(Buf *b, unsigned v) { b->data[b->len++] = (unsigned char)v; }

static inline void put_be32(Buf *b, uint32_t v) {
    unsigned char *p = b->data + b->len;
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
    b->len += 4;
}

static inline void put_be64(Buf *b, uint64_t v) {
    put_be32(b, (uint32_t)(v >> 32));
    put_be32(b, (uint32_t)v);
}

static inline uint32_t get_be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline uint64_t get_be64(const unsigned char *p) {
    return ((uint64_t)get_be32(p) << 32) | get_be32(p + 4);
}

static inline void set_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

#endif
