/* The hot calls on the native path (hot.c): start*, canCommitOrThrow and commitOrThrow,
 * decoded, applied to the native state, logged and answered in C — the success case only.
 * Anything else (another layout, an argument error, a conflict, a change set past a limit
 * or a warning threshold, a manager that is not running) is left untouched for the
 * generic Python path, which then runs the call and maps its error (txn/rpc/handler.py):
 * one error mapping for both engines. Same answers as txn/manager.py + txn/rpc/fastpath.py,
 * byte for byte (tests compare the two engines). */
#ifndef TXN_NATIVE_HOT_H
#define TXN_NATIVE_HOT_H

#include "codec.h"
#include "log.h"
#include "machine.h"

enum {
    HOT_START_SHORT,
    HOT_START_LONG,
    HOT_START_SHORT_CLIENT_ID,
    HOT_START_SHORT_TIMEOUT,
    HOT_START_SHORT_CLIENT_ID_TIMEOUT,
    HOT_CAN_COMMIT,
    HOT_COMMIT,
};

enum { RETAIN_OFF = 0, RETAIN_ACTIVE = 1, RETAIN_COMMITTED = 2 };

/* The txn.config.TxConfig values the hot calls check. */
typedef struct {
    int64_t default_timeout_s, long_timeout_s, max_timeout_s;
    int64_t count_limit, count_warn, size_limit, size_warn;
    int retain;
    PyObject *default_client; /* "unknown" (txn.manager.DEFAULT_CLIENT_ID), owned */
} HotConfig;

/* The last client id a connection sent, decoded once. */
typedef struct {
    Buf raw;
    PyObject *text; /* owned, or NULL */
} ClientCache;

void client_cache_clear(ClientCache *c);

/* Which hot call `frame` is, or -1 (not a hot call, or not a strict CALL header). */
int hot_kind(const unsigned char *frame, size_t n, CallHead *call);

/* Run hot call `kind` (requires the GIL and the manager's lock, with the manager running).
 * 1: done, *reply holds the framed reply and *ticket the log ticket it waits for; 0: left
 * for the generic path, nothing changed; -1: an exception is set (nothing changed). `clock`:
 * a callable giving now in epoch ms, or NULL to read the wall clock here. */
int hot_run(int kind, const CallHead *call, const unsigned char *frame, size_t n,
            Machine *m, Log *log, const HotConfig *cfg, PyObject *clock, ClientCache *cache,
            Buf *reply, int64_t *ticket);

#endif
