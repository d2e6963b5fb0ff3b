/* The Python face of the native log (txn.native.log.NativeLog wraps it): the methods of
 * txn.persist.wal.WriteAheadLog that the manager uses. */
#include "log.h"

#include <errno.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>


static int log_init(Log *log, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"error_type", "notify", "slow_sync_s", "on_slow", NULL};
    PyObject *error_type, *on_slow = NULL;
    int notify = 0;
    double slow_sync_s = 1.0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|pdO", names, &error_type, &notify,
                                     &slow_sync_s, &on_slow))
        return -1;
    if (log->error_type != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Log.__init__ called twice");
        return -1;
    }
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_mutex_init(&log->mu, NULL);
    pthread_cond_init(&log->cond, &attr);
    pthread_condattr_destroy(&attr);
    log->error_type = Py_NewRef(error_type);
    log->on_slow = on_slow == Py_None ? NULL : Py_XNewRef(on_slow);
    log->slow_sync_s = slow_sync_s;
    log->listeners = PyList_New(0);
    log->failure_listeners = PyList_New(0);
    log->closed = 1;
    log->fd = -1;
    log->notify_fd = notify ? eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC) : -1;
    if (notify && log->notify_fd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return log->listeners == NULL || log->failure_listeners == NULL ? -1 : 0;
}

/* A segment for `writer`: a LogWriter, or None for a log kept nowhere (a manager without
 * storage: every flush is durable at once). */
static Segment *new_segment(PyObject *writer) {
    int fd = -1;
    if (writer != Py_None) {
        PyObject *fd_obj = PyObject_CallMethod(writer, "fileno", NULL);
        if (fd_obj == NULL) return NULL;
        fd = fd_obj == Py_None ? -1 : (int)PyLong_AsLong(fd_obj);
        Py_DECREF(fd_obj);
        if (fd == -1 && PyErr_Occurred()) return NULL;
    }
    Segment *s = calloc(1, sizeof *s);
    if (s == NULL) return (Segment *)PyErr_NoMemory();
    s->writer = Py_NewRef(writer);
    s->fd = fd;
    return s;
}

static void free_segments(Segment *s) {
    while (s != NULL) {
        Segment *next = s->next;
        log_segment_free(s);
        s = next;
    }
}

static PyObject *l_open(Log *log, PyObject *writer) {
    if (log->tail != NULL) {
        PyErr_SetString(log->error_type, "the transaction log is open already");
        return NULL;
    }
    Segment *s = new_segment(writer);
    if (s == NULL) return NULL;
    log->writer = Py_NewRef(writer);
    log->fd = s->fd;
    log->file_size = log->durable = log->file_seq = 0;
    log->head = log->tail = s;
    log->closed = 0;
    Py_RETURN_NONE;
}

static PyObject *l_append(Log *log, PyObject *edit) {
    if (!PyBytes_Check(edit)) return PyErr_Format(PyExc_TypeError, "an edit must be bytes");
    Py_ssize_t n = PyBytes_GET_SIZE(edit);
    int64_t sequence;
    Buf *b = log_begin_append(log, 8 + (size_t)n, &sequence);
    if (b == NULL) return NULL;
    put_be64(b, (uint64_t)sequence);
    put_raw(b, PyBytes_AS_STRING(edit), (size_t)n);
    return PyLong_FromLongLong(log_end_append(log));
}

static PyObject *l_roll(Log *log, PyObject *writer) {
    Segment *s = new_segment(writer);
    if (s == NULL) return NULL;
    pthread_mutex_lock(&log->mu);
    if (log->failed || log->tail == NULL) {
        int failed = log->failed;
        pthread_mutex_unlock(&log->mu);
        free_segments(s);
        if (failed) PyErr_SetObject((PyObject *)Py_TYPE(log->failure), log->failure);
        else PyErr_SetString(log->error_type, "the transaction log is closed");
        return NULL;
    }
    log->tail->next = s;
    log->tail = s;
    log->file_seq = 0;
    pthread_mutex_unlock(&log->mu);
    Py_RETURN_NONE;
}

static PyObject *l_flush(Log *log, PyObject *unused) {
    int64_t r = log_flush(log, 1);
    if (r == -1) return NULL;
    if (r == -2) Py_RETURN_NONE;
    return PyLong_FromLongLong(r);
}

/* wait(ticket, timeout_s=None): see WriteAheadLog.wait. */
static PyObject *l_wait(Log *log, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"ticket", "timeout_s", NULL};
    long long ticket;
    PyObject *timeout = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "L|O", names, &ticket, &timeout))
        return NULL;
    double seconds = timeout == Py_None ? -1.0 : PyFloat_AsDouble(timeout);
    if (seconds == -1.0 && PyErr_Occurred()) return NULL;
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    if (seconds >= 0) {
        deadline.tv_sec += (time_t)seconds;
        deadline.tv_nsec += (long)((seconds - (double)(time_t)seconds) * 1e9);
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000L;
        }
    }
    for (;;) {
        pthread_mutex_lock(&log->mu);
        int done = log->synced >= ticket, failed = log->failed, lead = !log->flushing;
        pthread_mutex_unlock(&log->mu);
        if (done) Py_RETURN_NONE;
        if (failed) {
            PyErr_SetObject((PyObject *)Py_TYPE(log->failure), log->failure);
            return NULL;
        }
        if (lead) {
            if (log_flush(log, 1) == -1) return NULL;
            continue;
        }
        int timed_out = 0;
        Py_BEGIN_ALLOW_THREADS pthread_mutex_lock(&log->mu);
        while (log->flushing && log->synced < ticket && !log->failed && !timed_out) {
            if (seconds < 0)
                pthread_cond_wait(&log->cond, &log->mu);
            else
                timed_out = pthread_cond_timedwait(&log->cond, &log->mu, &deadline) == ETIMEDOUT;
        }
        pthread_mutex_unlock(&log->mu);
        Py_END_ALLOW_THREADS if (timed_out) {
            return PyErr_Format(PyExc_TimeoutError, "ticket %lld not durable after %R s", ticket,
                                timeout);
        }
    }
}

static PyObject *l_close(Log *log, PyObject *unused) {
    if (!log->failed && !log->closed) {
        PyObject *r = PyObject_CallMethod((PyObject *)log, "wait", "L", (long long)log->appended);
        if (r == NULL && !log->failed) return NULL;
        Py_XDECREF(r);
        PyErr_Clear();
    }
    pthread_mutex_lock(&log->mu);
    log->closed = 1;
    Segment *pending = log->head;
    log->head = log->tail = NULL;
    pthread_mutex_unlock(&log->mu);
    for (Segment *s = pending; s != NULL; s = s->next) { /* after a failure: unused files */
        if (s->writer == log->writer || s->writer == Py_None) continue;
        PyObject *r = PyObject_CallMethod(s->writer, "close", NULL);
        Py_XDECREF(r);
        PyErr_Clear();
    }
    free_segments(pending);
    if (log->writer != NULL && log->writer != Py_None) {
        PyObject *r = PyObject_CallMethod(log->writer, "close", NULL);
        Py_XDECREF(r);
        PyErr_Clear();
        Py_CLEAR(log->writer);
        log->fd = -1;
    }
    if (log->failed) {
        PyErr_SetObject((PyObject *)Py_TYPE(log->failure), log->failure);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* add_listener(fn, failures_only=False): fn(ticket, failure) after every flush, or only
 * after a failed one. */
static PyObject *l_add_listener(Log *log, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"", "failures_only", NULL};
    PyObject *fn;
    int failures_only = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$p:add_listener", kwlist, &fn,
                                     &failures_only))
        return NULL;
    if (PyList_Append(failures_only ? log->failure_listeners : log->listeners, fn) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *l_remove_listener(Log *log, PyObject *fn) {
    int in_all = PySequence_Contains(log->listeners, fn);
    if (in_all < 0) return NULL;
    PyObject *list = in_all ? log->listeners : log->failure_listeners;
    PyObject *r = PyObject_CallMethod(list, "remove", "O", fn);
    Py_XDECREF(r);
    return r == NULL ? NULL : Py_NewRef(Py_None);
}

static PyObject *get_last_appended(Log *log, void *unused) {
    pthread_mutex_lock(&log->mu);
    int64_t v = log->appended;
    pthread_mutex_unlock(&log->mu);
    return PyLong_FromLongLong(v);
}

static PyObject *get_synced(Log *log, void *unused) { return PyLong_FromLongLong(log_synced(log)); }

static PyObject *get_has_pending(Log *log, void *unused) {
    return PyBool_FromLong(log_has_pending(log));
}

static PyObject *get_failure(Log *log, void *unused) {
    return Py_NewRef(log->failure != NULL ? log->failure : Py_None);
}

static PyObject *get_stats(Log *log, void *unused) {
    pthread_mutex_lock(&log->mu);
    long long edits = log->stat_edits, syncs = log->stat_syncs, bytes = log->stat_bytes;
    long long max_batch = log->stat_max_batch;
    double seconds = log->stat_sync_seconds;
    pthread_mutex_unlock(&log->mu);
    return Py_BuildValue("LLLdL", edits, syncs, bytes, seconds, max_batch);
}

static PyObject *get_notify_fd(Log *log, void *unused) { return PyLong_FromLong(log->notify_fd); }

static PyMethodDef methods[] = {
    {"open", (PyCFunction)l_open, METH_O, "open(writer): the first file (None: keep nothing)"},
    {"append", (PyCFunction)l_append, METH_O, "append(edit bytes) -> ticket"},
    {"roll", (PyCFunction)l_roll, METH_O, "roll(writer): later appends go to writer"},
    {"flush", (PyCFunction)l_flush, METH_NOARGS, "durable ticket, or None (another flush)"},
    {"wait", (PyCFunction)(void (*)(void))l_wait, METH_VARARGS | METH_KEYWORDS, NULL},
    {"close", (PyCFunction)l_close, METH_NOARGS, NULL},
    {"add_listener", (PyCFunction)(void (*)(void))l_add_listener, METH_VARARGS | METH_KEYWORDS,
     NULL},
    {"remove_listener", (PyCFunction)l_remove_listener, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef getset[] = {
    {"last_appended", (getter)get_last_appended, NULL, NULL, NULL},
    {"synced", (getter)get_synced, NULL, NULL, NULL},
    {"has_pending", (getter)get_has_pending, NULL, NULL, NULL},
    {"failure", (getter)get_failure, NULL, NULL, NULL},
    {"stats", (getter)get_stats, NULL, "(edits, syncs, bytes, sync seconds, max batch)", NULL},
    {"notify_fd", (getter)get_notify_fd, NULL,
     "eventfd written after every flush the server's loop did not lead", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* Descriptors are -1 until init opens them: a Log freed without init closes nothing. */
static PyObject *log_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    Log *log = (Log *)type->tp_alloc(type, 0);
    if (log != NULL) log->fd = log->notify_fd = -1;
    return (PyObject *)log;
}

/* The listeners (and the writers, whose objects may refer back to the manager) can make a
 * cycle through the log: the collector must see them. */
static int log_traverse(Log *log, visitproc visit, void *arg) {
    Py_VISIT(log->writer);
    Py_VISIT(log->failure);
    Py_VISIT(log->error_type);
    Py_VISIT(log->listeners);
    Py_VISIT(log->failure_listeners);
    Py_VISIT(log->on_slow);
    for (Segment *s = log->head; s != NULL; s = s->next) Py_VISIT(s->writer);
    return 0;
}

/* Breaks a cycle by emptying the listener lists (kept, so that a flush still finds them)
 * and dropping on_slow; the other references are to objects that clear themselves. */
static int log_clear(Log *log) {
    if (log->listeners != NULL) PyList_SetSlice(log->listeners, 0, PY_SSIZE_T_MAX, NULL);
    if (log->failure_listeners != NULL)
        PyList_SetSlice(log->failure_listeners, 0, PY_SSIZE_T_MAX, NULL);
    Py_CLEAR(log->on_slow);
    return 0;
}

static void log_dealloc(Log *log) {
    PyObject_GC_UnTrack(log);
    free_segments(log->head);
    Py_XDECREF(log->writer);
    Py_XDECREF(log->failure);
    Py_XDECREF(log->error_type);
    Py_XDECREF(log->listeners);
    Py_XDECREF(log->failure_listeners);
    Py_XDECREF(log->on_slow);
    if (log->notify_fd >= 0) close(log->notify_fd);
    if (log->error_type != NULL) {
        pthread_mutex_destroy(&log->mu);
        pthread_cond_destroy(&log->cond);
    }
    Py_TYPE(log)->tp_free((PyObject *)log);
}

PyTypeObject LogType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "txn.native._core.Log",
    .tp_basicsize = sizeof(Log),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The native write-ahead log (see txn/native/log.py).",
    .tp_new = log_new,
    .tp_traverse = (traverseproc)log_traverse,
    .tp_clear = (inquiry)log_clear,
    .tp_init = (initproc)log_init,
    .tp_dealloc = (destructor)log_dealloc,
    .tp_methods = methods,
    .tp_getset = getset,
};
