/* See log.h. The file format is txn/persist/log_codec.py's: a file header, then one
 * CRC32C-checked frame per flush and file (split at record boundaries past 64 MiB), each
 * saying how much of the file was durable when it was written. */

#include "log.h"

#include <errno.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "codec.h"

#define FRAME_HEADER_SIZE 24
#define MAX_FRAME_PAYLOAD (64 * 1024 * 1024)
static const unsigned char FILE_HEADER[8] = {'T', 'X', 'M', 'S', 'L', 'O', 'G', 0x01};
static const unsigned char FRAME_MAGIC[4] = {0xf1, 'T', 'X', 'B'};

static double monotonic(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* -- segments ------------------------------------------------------------------------ */

void log_segment_free(Segment *s) {
    Py_XDECREF(s->writer);
    buf_free(&s->records);
    free(s->breaks);
    free(s);
}

/* -- appending ------------------------------------------------------------------------ */

static int refuse_append(Log *log) {
    if (log->failed) {
        PyErr_SetObject((PyObject *)Py_TYPE(log->failure), log->failure);
        return -1;
    }
    if (log->closed || log->tail == NULL) {
        PyErr_SetString(log->error_type, "the transaction log is closed");
        return -1;
    }
    return 0;
}

Buf *log_begin_append(Log *log, size_t size, int64_t *sequence) {
    pthread_mutex_lock(&log->mu);
    if (refuse_append(log) < 0) {
        pthread_mutex_unlock(&log->mu);
        return NULL;
    }
    Segment *s = log->tail;
    size_t frame = s->records.len - (s->nbreaks ? s->breaks[s->nbreaks - 1] : 0);
    if (frame > 0 && frame + size > MAX_FRAME_PAYLOAD) { /* this record opens a new frame */
        size_t *breaks = realloc(s->breaks, (s->nbreaks + 1) * sizeof(size_t));
        if (breaks == NULL) {
            pthread_mutex_unlock(&log->mu);
            PyErr_NoMemory();
            return NULL;
        }
        s->breaks = breaks;
        s->breaks[s->nbreaks++] = s->records.len;
    }
    if (buf_reserve(&s->records, size) < 0) {
        pthread_mutex_unlock(&log->mu);
        PyErr_NoMemory();
        return NULL;
    }
    *sequence = log->file_seq;
    return &s->records;
}

int64_t log_end_append(Log *log) {
    log->file_seq++;
    log->tail->edits++;
    int64_t ticket = ++log->appended;
    pthread_mutex_unlock(&log->mu);
    return ticket;
}

void log_cancel_append(Log *log, size_t keep_len) {
    log->tail->records.len = keep_len;
    pthread_mutex_unlock(&log->mu);
}

/* -- flushing ------------------------------------------------------------------------- */

typedef struct {
    PyObject *writer;
    int fd;
    int64_t size, durable;
    int dirty;
} FileState;

/* Write `data` (n bytes) with iovecs to fd, or through the Python writer. Returns 0, or -1
 * with errno set (fd) or a Python exception set (writer; needs the GIL). */
static int write_all(FileState *f, struct iovec *iov, int iovcnt) {
    if (f->writer == Py_None) return 0; /* a log kept nowhere */
    if (f->fd >= 0) {
        while (iovcnt > 0) {
            ssize_t w = writev(f->fd, iov, iovcnt);
            if (w < 0) {
                if (errno == EINTR) continue;
                return -1;
            }
            while (iovcnt > 0 && (size_t)w >= iov->iov_len) {
                w -= (ssize_t)iov->iov_len;
                iov++;
                iovcnt--;
            }
            if (iovcnt > 0) {
                iov->iov_base = (char *)iov->iov_base + w;
                iov->iov_len -= (size_t)w;
            }
        }
        return 0;
    }
    size_t total = 0;
    for (int i = 0; i < iovcnt; i++) total += iov[i].iov_len;
    PyObject *data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (data == NULL) return -1;
    char *p = PyBytes_AS_STRING(data);
    for (int i = 0; i < iovcnt; i++, p += iov[i - 1].iov_len) memcpy(p, iov[i].iov_base, iov[i].iov_len);
    PyObject *r = PyObject_CallMethod(f->writer, "write", "O", data);
    Py_DECREF(data);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

static int sync_file(FileState *f) {
    if (f->writer == Py_None) return 0;
    if (f->fd >= 0) {
        while (fdatasync(f->fd) != 0)
            if (errno != EINTR) return -1;
        return 0;
    }
    PyObject *r = PyObject_CallMethod(f->writer, "sync", NULL);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* Frame and write one segment's records. Returns bytes written, or -1. */
static int64_t write_segment(FileState *f, Segment *s) {
    int64_t written = 0;
    size_t from = 0;
    for (size_t k = 0; k <= s->nbreaks; k++) {
        size_t to = k < s->nbreaks ? s->breaks[k] : s->records.len;
        unsigned char head[FRAME_HEADER_SIZE];
        memcpy(head, FRAME_MAGIC, 4);
        set_be32(head + 4, (uint32_t)(to - from));
        set_be32(head + 8, (uint32_t)((uint64_t)f->durable >> 32));
        set_be32(head + 12, (uint32_t)f->durable);
        set_be32(head + 16, crc32c(0, s->records.data + from, to - from));
        set_be32(head + 20, crc32c(0, head, 20));
        struct iovec iov[3];
        int n = 0;
        if (f->size == 0) iov[n++] = (struct iovec){(void *)FILE_HEADER, sizeof FILE_HEADER};
        iov[n++] = (struct iovec){head, sizeof head};
        iov[n++] = (struct iovec){s->records.data + from, to - from};
        size_t bytes = (f->size == 0 ? sizeof FILE_HEADER : 0) + sizeof head + (to - from);
        if (write_all(f, iov, n) < 0) return -1;
        f->size += (int64_t)bytes;
        f->dirty = 1;
        written += (int64_t)bytes;
        from = to;
    }
    return written;
}

/* The I/O of one flush over the taken segments; *retired collects the writers left for
 * newer files (synced, to be closed). 0, or -1 (errno for descriptors, an exception set
 * for Python writers). */
static int flush_io(Segment *chain, FileState *f, PyObject **retired,
                    int *nretired, int64_t *bytes) {
    for (Segment *s = chain; s != NULL; s = s->next) {
        if (s->writer != f->writer) { /* a roll: the file left must be durable first */
            if (f->dirty && sync_file(f) < 0) return -1;
            retired[(*nretired)++] = f->writer;
            *f = (FileState){s->writer, s->fd, 0, 0, 0};
        }
        if (s->records.len > 0) {
            int64_t w = write_segment(f, s);
            if (w < 0) return -1;
            *bytes += w;
        }
    }
    /* fsync before any waiter is released: an acknowledged edit must survive a crash */
    if (f->dirty && sync_file(f) < 0) return -1;
    f->dirty = 0;
    f->durable = f->size;
    return 0;
}

/* The failure of a flush as the log's error (requires the GIL): from errno, or the
 * Python exception set (a TxStorageError is kept, anything else wrapped). */
static PyObject *flush_failure(Log *log, int from_errno, int err) {
    PyObject *failure;
    if (from_errno) {
        failure = PyObject_CallFunction(log->error_type, "s",
                                        "cannot write or sync the transaction log");
        if (failure != NULL) {
            PyObject *cause = PyObject_CallFunction(PyExc_OSError, "is", err, strerror(err));
            PyException_SetCause(failure, cause); /* steals cause */
        }
        return failure;
    }
    PyObject *type, *exc, *tb;
    PyErr_Fetch(&type, &exc, &tb);
    PyErr_NormalizeException(&type, &exc, &tb);
    if (tb != NULL) PyException_SetTraceback(exc, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    if (PyObject_IsInstance(exc, log->error_type) == 1) return exc;
    failure = PyObject_CallFunction(log->error_type, "s", "cannot write the transaction log");
    if (failure != NULL)
        PyException_SetCause(failure, exc);
    else
        Py_DECREF(exc);
    return failure;
}

static void call_each(PyObject *list, int64_t ticket, PyObject *failure) {
    if (list == NULL || PyList_GET_SIZE(list) == 0) return;
    PyObject *listeners = PyList_GetSlice(list, 0, PY_SSIZE_T_MAX);
    if (listeners == NULL) {
        PyErr_WriteUnraisable(list);
        return;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(listeners); i++) {
        PyObject *r = PyObject_CallFunction(PyList_GET_ITEM(listeners, i), "LO",
                                            (long long)ticket, failure ? failure : Py_None);
        if (r == NULL) PyErr_WriteUnraisable(PyList_GET_ITEM(listeners, i));
        Py_XDECREF(r);
    }
    Py_DECREF(listeners);
}

/* After a flush: every listener, and the failure listeners when it failed (a flush that
 * succeeds calls no Python unless someone listens to every flush). */
static void call_listeners(Log *log, int64_t ticket, PyObject *failure) {
    call_each(log->listeners, ticket, failure);
    if (failure != NULL) call_each(log->failure_listeners, ticket, failure);
}

int64_t log_flush(Log *log, int notify) {
    Segment *fresh = calloc(1, sizeof *fresh);
    if (fresh == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    pthread_mutex_lock(&log->mu);
    int64_t result = log->synced;
    if (log->failed || log->flushing || log->tail == NULL ||
        (log->head == log->tail && log->head->records.len == 0)) {
        int failed = log->failed, flushing = log->flushing;
        pthread_mutex_unlock(&log->mu);
        free(fresh);
        if (failed) {
            PyErr_SetObject((PyObject *)Py_TYPE(log->failure), log->failure);
            return -1;
        }
        return flushing ? -2 : result;
    }
    Segment *chain = log->head;
    fresh->writer = Py_NewRef(log->tail->writer);
    fresh->fd = log->tail->fd;
    log->head = log->tail = fresh;
    int64_t last = log->appended;
    log->flushing = 1;
    pthread_mutex_unlock(&log->mu);

    int all_fd = 1, nseg = 0;
    int64_t edits = 0, bytes = 0;
    for (Segment *s = chain; s != NULL; s = s->next, nseg++) {
        all_fd &= s->fd >= 0 || s->writer == Py_None;
        edits += s->edits;
    }
    all_fd &= log->fd >= 0 || log->writer == Py_None;
    PyObject **retired = malloc((size_t)nseg * sizeof(PyObject *));
    int nretired = 0, rc = -1, err = ENOMEM;
    FileState f = {log->writer, log->fd, log->file_size, log->durable, 0};
    double started = monotonic();
    if (retired != NULL && all_fd) {
        Py_BEGIN_ALLOW_THREADS rc = flush_io(chain, &f, retired, &nretired, &bytes);
        err = errno;
        Py_END_ALLOW_THREADS
    } else if (retired != NULL) {
        rc = flush_io(chain, &f, retired, &nretired, &bytes);
    }
    double elapsed = monotonic() - started;
    PyObject *failure = NULL;
    if (rc < 0) {
        if (retired == NULL || !all_fd) {
            if (!PyErr_Occurred()) PyErr_NoMemory();
            failure = flush_failure(log, 0, 0);
        } else {
            failure = flush_failure(log, 1, err);
        }
        if (failure == NULL) { /* could not even build the error: keep what was raised */
            PyObject *type, *tb;
            PyErr_Fetch(&type, &failure, &tb);
            PyErr_NormalizeException(&type, &failure, &tb);
            Py_XDECREF(type);
            Py_XDECREF(tb);
        }
    }
    for (int i = 0; i < nretired; i++) { /* synced by flush_io before it moved on */
        if (retired[i] == Py_None) continue;
        PyObject *r = PyObject_CallMethod(retired[i], "close", NULL);
        if (r == NULL) PyErr_WriteUnraisable(retired[i]);
        Py_XDECREF(r);
    }
    free(retired);
    if (f.writer != log->writer) {
        Py_INCREF(f.writer);
        Py_SETREF(log->writer, f.writer);
        log->fd = f.fd;
    }
    log->file_size = f.size;
    log->durable = f.durable;
    while (chain != NULL) {
        Segment *next = chain->next;
        log_segment_free(chain);
        chain = next;
    }

    pthread_mutex_lock(&log->mu);
    if (failure != NULL) {
        if (!log->failed) {
            log->failed = 1;
            log->failure = Py_NewRef(failure);
        }
    } else {
        if (last > log->synced) log->synced = last;
        log->stat_edits += edits;
        log->stat_syncs++;
        log->stat_bytes += bytes;
        log->stat_sync_seconds += elapsed;
        if (edits > log->stat_max_batch) log->stat_max_batch = edits;
    }
    log->flushing = 0;
    int64_t synced = log->synced;
    pthread_cond_broadcast(&log->cond);
    pthread_mutex_unlock(&log->mu);
    if (notify && log->notify_fd >= 0) {
        uint64_t one = 1;
        ssize_t ignored = write(log->notify_fd, &one, sizeof one);
        (void)ignored;
    }
    if (failure == NULL && log->on_slow != NULL && elapsed >= log->slow_sync_s) {
        PyObject *r = PyObject_CallFunction(log->on_slow, "Ld", (long long)edits, elapsed);
        if (r == NULL) PyErr_WriteUnraisable(log->on_slow);
        Py_XDECREF(r);
    }
    call_listeners(log, synced, failure);
    if (failure != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(failure), failure);
        Py_DECREF(failure);
        return -1;
    }
    return last;
}

int64_t log_synced(Log *log) {
    pthread_mutex_lock(&log->mu);
    int64_t s = log->synced;
    pthread_mutex_unlock(&log->mu);
    return s;
}

int log_has_pending(Log *log) {
    pthread_mutex_lock(&log->mu);
    int pending = log->head != NULL && (log->head != log->tail || log->head->records.len > 0);
    pthread_mutex_unlock(&log->mu);
    return pending;
}

int log_failed(Log *log) {
    pthread_mutex_lock(&log->mu);
    int failed = log->failed;
    pthread_mutex_unlock(&log->mu);
    return failed;
}
