/* Byte codecs of the native engine (codec.c): the hot Thrift calls and their successful
 * replies (as txn/rpc/wire.py), TTransaction (as txn/codec.py), log edits (as
 * txn/persist/edit_codec.py) and CRC32C. Pure: no I/O; change keys are read from
 * ChangeSets (bytes objects), so the edit writers need the GIL. */
#ifndef TXN_NATIVE_CODEC_H
#define TXN_NATIVE_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "changeset.h"

/* -- calls ------------------------------------------------------------------------------ */

typedef struct {
    const unsigned char *name;
    size_t name_len;
    const unsigned char *seqid; /* 4 bytes */
    size_t args;                /* offset of the argument struct */
} CallHead;

/* The header of a CALL with a strict header; 0, or -1 for anything else (wire.parse_call). */
int parse_call(const unsigned char *f, size_t n, CallHead *call);

/* Argument decoders: 0 for the exact standard layout, -1 otherwise (as txn/rpc/wire.py). */
int args_none(const unsigned char *f, size_t n, size_t pos);
int args_timeout(const unsigned char *f, size_t n, size_t pos, int32_t *timeout);
int args_client_id(const unsigned char *f, size_t n, size_t pos, size_t *start, size_t *len);
int args_client_id_timeout(const unsigned char *f, size_t n, size_t pos, size_t *start,
                           size_t *len, int32_t *timeout);
/* canCommitOrThrow: the key count, then keys_at() walks the keys. */
int args_can_commit(const unsigned char *f, size_t n, size_t pos, int64_t *tx, int32_t *count);
/* The i-th key of a can-commit already validated by args_can_commit, walked in order:
 * *at starts at pos + 19 and moves past each key. */
static inline const unsigned char *key_at(const unsigned char *f, size_t *at, size_t *len) {
    *len = get_be32(f + *at);
    const unsigned char *key = f + *at + 4;
    *at += 4 + *len;
    return key;
}
int args_commit(const unsigned char *f, size_t n, size_t pos, int64_t *tx, int64_t *wp);

/* -- replies ---------------------------------------------------------------------------- */

/* Bytes of a framed REPLY before its result struct: frame length, header, name, seqid. */
size_t reply_head_size(size_t name_len);
/* Write that head, with a frame length covering `result_size` bytes of result struct. */
void put_reply_head(Buf *b, const CallHead *call, size_t result_size);

/* The result struct of a successful start: field 0 holding a TTransaction with the
 * standard layout (txn.codec.encode_transaction), `ids` being the in-progress list. */
size_t tx_result_size(size_t ninvalid, size_t nids, size_t ncps);
void put_tx_result(Buf *b, int64_t tx_id, int64_t read_pointer, const int64_t *invalid,
                   size_t ninvalid, const int64_t *ids, size_t id_stride, size_t nids,
                   int64_t first_short, int long_tx, int64_t write_pointer);

/* -- log edits (codec V4) ----------------------------------------------------------------- */

enum { EDIT_INPROGRESS = 0, EDIT_COMMITTING = 1, EDIT_COMMITTED = 2 };

typedef struct {
    int state;
    int64_t write_pointer, expiration, commit_pointer, visibility_upper_bound;
    int can_commit;
    int type; /* -1: none, 0 SHORT, 1 LONG */
    const ChangeSet *changes; /* NULL: none */
} EditFields;

/* A log record: 8-byte sequence number + the edit (txn.persist.edit_codec.encode_record). */
size_t record_size(const EditFields *e);
void put_record(Buf *b, int64_t sequence, const EditFields *e);

/* -- checksums ----------------------------------------------------------------------------- */

/* crc32c_init() once (module init) before any crc32c(). */
void crc32c_init(void);
uint32_t crc32c(uint32_t crc, const unsigned char *data, size_t n);

#endif
