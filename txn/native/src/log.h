/* The native write-ahead log (log.c): txn/persist/wal.py's contract, in C, so that the
 * native server appends hot-call edits without Python and syncs without the GIL.
 *
 * Appends queue encoded records (under the manager's lock: log order is state order) and
 * return tickets 1, 2, 3, ... Durability is leader-based group commit: whoever needs a
 * ticket durable while no flush runs flushes everything queued — framed
 * (txn.persist.log_codec), written, fdatasync'ed — with the GIL released when the files
 * are OS files. A failed write or sync fails the log for good.
 *
 * Locking: `mu` guards the queue and counters and is never held while taking the GIL or
 * calling Python; the GIL guards the Python objects (writers, listeners, the failure).
 */
#ifndef TXN_NATIVE_LOG_H
#define TXN_NATIVE_LOG_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>

#include "buf.h"

typedef struct Segment {
    struct Segment *next;
    PyObject *writer; /* the LogWriter these records go to (owned) */
    int fd;           /* its descriptor, or -1: write through the Python object */
    Buf records;
    size_t *breaks; /* offsets where a new frame starts (batches past 64 MiB) */
    size_t nbreaks;
    int64_t edits;
} Segment;

typedef struct {
    PyObject_HEAD
    pthread_mutex_t mu;
    pthread_cond_t cond; /* a flush ended */
    Segment *head, *tail; /* queued, not yet taken by a flush; tail takes appends */
    PyObject *writer;  /* the file flushes write to (owned); appends may be past a roll */
    int fd;            /* its descriptor, or -1 */
    int64_t file_size; /* bytes written to `writer` */
    int64_t durable;   /* bytes of `writer` known durable */
    int64_t file_seq;  /* next record sequence number in the tail's file */
    int64_t appended, synced;
    int flushing, closed, failed;
    int notify_fd; /* eventfd written after every flush but the server loop's own, or -1 */
    PyObject *failure; /* the TxStorageError, once failed */
    PyObject *error_type;
    PyObject *listeners;         /* list of callables (ticket, failure): after every flush */
    PyObject *failure_listeners; /* the same, called only when a flush fails */
    PyObject *on_slow;   /* called (edits, seconds) after a flush slower than slow_sync_s */
    double slow_sync_s;
    int64_t stat_edits, stat_syncs, stat_bytes, stat_max_batch;
    double stat_sync_seconds;
} Log;

extern PyTypeObject LogType;

/* Append: log_begin_append returns the buffer to write one record of `size` bytes into
 * (with its sequence number) and holds `mu` until log_end_append (which returns the
 * ticket) or log_cancel_append. NULL with an exception set when the log is failed or
 * closed or memory ran out. Requires the GIL. */
Buf *log_begin_append(Log *log, size_t size, int64_t *sequence);
int64_t log_end_append(Log *log);
void log_cancel_append(Log *log, size_t keep_len);

/* Lead a flush of everything queued (requires the GIL; released during I/O to OS files).
 * Returns the durable ticket, -2 when another thread is flushing (it will write the notify
 * fd), or -1 with the exception set when the log has failed. `notify` 0: the caller is the
 * one the notify fd would wake (the server's loop, which looks at the outcome itself), so
 * the fd is not written. */
int64_t log_flush(Log *log, int notify);

void log_segment_free(Segment *s);
int64_t log_synced(Log *log);
int log_has_pending(Log *log);
int log_failed(Log *log);

#endif
