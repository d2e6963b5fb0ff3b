/* See codec.h. Every decoder mirrors its txn/rpc/wire.py counterpart check for check: the
 * exact standard layout, or nothing (the server then takes the generic path), so that the
 * two engines give every call the same meaning. */
#include "codec.h"

/* Field headers: type byte + field id. */
static const unsigned char STRING_1[3] = {0x0b, 0x00, 0x01};
static const unsigned char I32_1[3] = {0x08, 0x00, 0x01};
static const unsigned char I32_2[3] = {0x08, 0x00, 0x02};
static const unsigned char I64_1[3] = {0x0a, 0x00, 0x01};
static const unsigned char I64_2[3] = {0x0a, 0x00, 0x02};
static const unsigned char BINARY_SET_2[4] = {0x0e, 0x00, 0x02, 0x0b};

enum { T_STOP = 0, T_I32 = 8, T_I64 = 10, T_STRUCT = 12, T_LIST = 15 };

/* -- calls ------------------------------------------------------------------------------ */

int parse_call(const unsigned char *f, size_t n, CallHead *call) {
    if (n < 12 || f[0] != 0x80 || f[1] != 0x01 || f[2] != 0 || f[3] != 1) return -1;
    size_t end = 8 + (size_t)get_be32(f + 4);
    if (end < 8 || end + 4 > n) return -1;
    call->name = f + 8;
    call->name_len = end - 8;
    call->seqid = f + end;
    call->args = end + 4;
    return 0;
}

int args_none(const unsigned char *f, size_t n, size_t pos) {
    return n == pos + 1 && f[pos] == T_STOP ? 0 : -1;
}

int args_timeout(const unsigned char *f, size_t n, size_t pos, int32_t *timeout) {
    if (n != pos + 8 || memcmp(f + pos, I32_1, 3) != 0 || f[pos + 7] != T_STOP) return -1;
    *timeout = (int32_t)get_be32(f + pos + 3);
    return 0;
}

/* Field 1 as a string: its bytes and the position after it (UTF-8 is the caller's). */
static int string_1(const unsigned char *f, size_t n, size_t pos, size_t *start, size_t *len) {
    if (n < pos + 7 || memcmp(f + pos, STRING_1, 3) != 0) return -1;
    int32_t size = (int32_t)get_be32(f + pos + 3);
    if (size < 0 || (size_t)size > n - (pos + 7)) return -1;
    *start = pos + 7;
    *len = (size_t)size;
    return 0;
}

int args_client_id(const unsigned char *f, size_t n, size_t pos, size_t *start, size_t *len) {
    if (string_1(f, n, pos, start, len) < 0) return -1;
    size_t end = *start + *len;
    return n == end + 1 && f[end] == T_STOP ? 0 : -1;
}

int args_client_id_timeout(const unsigned char *f, size_t n, size_t pos, size_t *start,
                           size_t *len, int32_t *timeout) {
    if (string_1(f, n, pos, start, len) < 0) return -1;
    size_t p = *start + *len;
    if (n != p + 8 || memcmp(f + p, I32_2, 3) != 0 || f[p + 7] != T_STOP) return -1;
    *timeout = (int32_t)get_be32(f + p + 3);
    return 0;
}

int args_can_commit(const unsigned char *f, size_t n, size_t pos, int64_t *tx, int32_t *count) {
    if (n < pos + 20 || memcmp(f + pos, I64_1, 3) != 0 ||
        memcmp(f + pos + 11, BINARY_SET_2, 4) != 0)
        return -1;
    int32_t keys = (int32_t)get_be32(f + pos + 15);
    size_t p = pos + 19;
    if (keys < 0 || (size_t)keys > (n - p) / 4) return -1;
    for (int32_t i = 0; i < keys; i++) {
        if (p + 4 > n) return -1;
        int32_t size = (int32_t)get_be32(f + p);
        if (size < 0 || (size_t)size > n - (p + 4)) return -1;
        p += 4 + (size_t)size;
    }
    if (p + 1 != n || f[p] != T_STOP) return -1;
    *tx = (int64_t)get_be64(f + pos + 3);
    *count = keys;
    return 0;
}

int args_commit(const unsigned char *f, size_t n, size_t pos, int64_t *tx, int64_t *wp) {
    if (n != pos + 23 || memcmp(f + pos, I64_1, 3) != 0 ||
        memcmp(f + pos + 11, I64_2, 3) != 0 || f[pos + 22] != T_STOP)
        return -1;
    *tx = (int64_t)get_be64(f + pos + 3);
    *wp = (int64_t)get_be64(f + pos + 14);
    return 0;
}

/* -- replies ---------------------------------------------------------------------------- */

size_t reply_head_size(size_t name_len) { return 4 + 8 + name_len + 4; }

void put_reply_head(Buf *b, const CallHead *call, size_t result_size) {
    put_be32(b, (uint32_t)(reply_head_size(call->name_len) - 4 + result_size));
    put_be32(b, 0x80010002u); /* version 1, REPLY */
    put_be32(b, (uint32_t)call->name_len);
    put_raw(b, call->name, call->name_len);
    put_raw(b, call->seqid, 4);
}

size_t tx_result_size(size_t ninvalid, size_t nids, size_t ncps) {
    /* field 0 header; fields 1, 2, 5, 7 (i64), 3, 4, 8 (list<i64>), 6, 9 (i32); STOP x2 */
    return 3 + 4 * 11 + 3 * 8 + 8 * (ninvalid + nids + ncps) + 2 * 7 + 2;
}

static void put_field(Buf *b, unsigned type, unsigned id) {
    put_u8(b, type);
    put_u8(b, 0);
    put_u8(b, id);
}

static void put_i64_field(Buf *b, unsigned id, int64_t v) {
    put_field(b, T_I64, id);
    put_be64(b, (uint64_t)v);
}

static void put_list_head(Buf *b, unsigned id, size_t n) {
    put_field(b, T_LIST, id);
    put_u8(b, T_I64);
    put_be32(b, (uint32_t)n);
}

void put_tx_result(Buf *b, int64_t tx_id, int64_t read_pointer, const int64_t *invalid,
                   size_t ninvalid, const int64_t *ids, size_t id_stride, size_t nids,
                   int64_t first_short, int long_tx, int64_t write_pointer) {
    put_field(b, T_STRUCT, 0);
    put_i64_field(b, 1, tx_id);
    put_i64_field(b, 2, read_pointer);
    put_list_head(b, 3, ninvalid);
    for (size_t i = 0; i < ninvalid; i++) put_be64(b, (uint64_t)invalid[i]);
    put_list_head(b, 4, nids);
    const unsigned char *id = (const unsigned char *)ids;
    for (size_t i = 0; i < nids; i++, id += id_stride) put_be64(b, *(const uint64_t *)id);
    put_i64_field(b, 5, first_short);
    put_field(b, T_I32, 6);
    put_be32(b, long_tx ? 2 : 1); /* TTransactionType */
    put_i64_field(b, 7, write_pointer);
    put_list_head(b, 8, 0); /* a new transaction has no checkpoints */
    put_field(b, T_I32, 9);
    put_be32(b, 1); /* TVisibilityLevel.SNAPSHOT */
    put_u8(b, T_STOP);
    put_u8(b, T_STOP); /* end of the result struct */
}

/* -- log edits ---------------------------------------------------------------------------- */

size_t record_size(const EditFields *e) {
    size_t keys = e->changes != NULL ? (size_t)PyBytes_GET_SIZE(e->changes->blob) : 0;
    /* sequence; version; head (q i q q ? i); keys; vub; type, nTruncate, truncate time;
     * parent, nCheckpoints */
    return 8 + 1 + (8 + 4 + 8 + 8 + 1 + 4) + keys + 8 + (4 + 4 + 8) + (8 + 4);
}

void put_record(Buf *b, int64_t sequence, const EditFields *e) {
    put_be64(b, (uint64_t)sequence);
    put_u8(b, 0xFC); /* codec version -4 */
    put_be64(b, (uint64_t)e->write_pointer);
    put_be32(b, (uint32_t)e->state);
    put_be64(b, (uint64_t)e->expiration);
    put_be64(b, (uint64_t)e->commit_pointer);
    put_u8(b, e->can_commit ? 1 : 0);
    put_be32(b, (uint32_t)(e->changes != NULL ? e->changes->n : 0));
    if (e->changes != NULL) /* ascending, as encode_edit writes them */
        put_raw(b, PyBytes_AS_STRING(e->changes->blob), (size_t)PyBytes_GET_SIZE(e->changes->blob));
    put_be64(b, (uint64_t)e->visibility_upper_bound);
    put_be32(b, (uint32_t)(int32_t)e->type);
    put_be32(b, 0); /* no truncated ids */
    put_be64(b, 0); /* truncate time */
    put_be64(b, 0); /* parent write pointer */
    put_be32(b, (uint32_t)-1); /* no checkpoint list */
}

/* -- CRC32C (Castagnoli) ---------------------------------------------------------------- */

static uint32_t crc_table[8][256];
static int crc_hw = -1;

void crc32c_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
#if defined(__x86_64__)
    crc_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#else
    crc_hw = 0;
#endif
}

static uint32_t crc_soft(uint32_t c, const unsigned char *p, size_t n) {
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24);
        c = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
            crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^ crc_table[3][p[4]] ^
            crc_table[2][p[5]] ^ crc_table[1][p[6]] ^ crc_table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--) c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
    return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_hard(uint32_t c, const unsigned char *p,
                                                           size_t n) {
    uint64_t c64 = c;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c64 = __builtin_ia32_crc32di(c64, v);
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c64;
    while (n--) c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}
#endif

uint32_t crc32c(uint32_t crc, const unsigned char *data, size_t n) {
    uint32_t c = ~crc;
#if defined(__x86_64__)
    if (crc_hw) return ~crc_hard(c, data, n);
#endif
    return ~crc_soft(c, data, n);
}
