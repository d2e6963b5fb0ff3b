/* The Python face of the native server (txn.native.server.NativeThriftServer wraps it). */
#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>


PyObject *server_serve(Server *s, PyObject *unused); /* server.c */
extern char SERVER_LISTEN_TAG, SERVER_WAKE_TAG, SERVER_TIMER_TAG, SERVER_LOG_TAG, SERVER_SENT_TAG;

static int watch(Server *s, int fd, void *tag) {
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = tag};
    return epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev);
}

/* Server(listen_fd, machine, log, lock, clock, dispatch, on_close, config): config is a dict
 * of the HotConfig values and the server's limits; clock None reads the wall clock in C. The
 * manager's state starts as "not running" until set_state(). The server owns listen_fd. */
static int server_init(Server *s, PyObject *args, PyObject *kwargs) {
    int listen_fd;
    PyObject *machine, *log, *config;
    if (s->initialized || s->lock != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Server.__init__ called twice");
        return -1;
    }
    PyObject *lock, *clock, *dispatch, *on_close;
    if (!PyArg_ParseTuple(args, "iO!O!O!OOOO!", &listen_fd, &MachineType, &machine, &LogType,
                          &log, &StateLockType, &lock, &clock, &dispatch, &on_close,
                          &PyDict_Type, &config))
        return -1;
    if (!((StateLock *)lock)->ready) {
        PyErr_SetString(PyExc_ValueError, "the state lock is not initialized");
        return -1;
    }
    s->run_state = 1;
    s->lock = (StateLock *)Py_NewRef(lock);
    s->clock = clock == Py_None ? NULL : Py_NewRef(clock);
    s->dispatch = Py_NewRef(dispatch);
    s->on_close = Py_NewRef(on_close);
    s->listen_fd = listen_fd;
    s->machine = (Machine *)Py_NewRef(machine);
    s->log = (Log *)Py_NewRef(log);
    long long values[12];
    static const char *names[] = {
        "default_timeout_s",    "long_timeout_s",      "max_timeout_s",
        "changeset_count_limit", "changeset_count_warn", "changeset_size_limit",
        "changeset_size_warn",  "retain_client_id",    "max_frame_bytes",
        "offload_frame_bytes",  "commit_delay_us",     "max_pending_frame_bytes",
    };
    for (int i = 0; i < 12; i++) {
        PyObject *v = PyDict_GetItemString(config, names[i]);
        if (v == NULL) {
            PyErr_Format(PyExc_KeyError, "config lacks %s", names[i]);
            return -1;
        }
        values[i] = PyLong_AsLongLong(v);
        if (values[i] == -1 && PyErr_Occurred()) return -1;
    }
    static const char *seconds[] = {"drain_timeout_s", "frame_timeout_s", "idle_timeout_s"};
    double *targets[] = {&s->drain_timeout_s, &s->frame_timeout_s, &s->idle_timeout_s};
    for (int i = 0; i < 3; i++) {
        PyObject *v = PyDict_GetItemString(config, seconds[i]);
        if (v == NULL) {
            PyErr_Format(PyExc_KeyError, "config lacks %s", seconds[i]);
            return -1;
        }
        *targets[i] = PyFloat_AsDouble(v);
        if (*targets[i] == -1.0 && PyErr_Occurred()) return -1;
    }
    PyObject *send_thread = PyDict_GetItemString(config, "send_thread");
    if (send_thread == NULL) {
        PyErr_SetString(PyExc_KeyError, "config lacks send_thread");
        return -1;
    }
    s->use_sender = PyObject_IsTrue(send_thread);
    if (s->use_sender < 0) return -1;
    PyObject *client = PyDict_GetItemString(config, "default_client");
    if (client == NULL) {
        PyErr_SetString(PyExc_KeyError, "config lacks default_client");
        return -1;
    }
    s->cfg = (HotConfig){values[0], values[1], values[2], values[3], values[4],
                         values[5], values[6], (int)values[7], Py_NewRef(client)};
    s->max_frame_bytes = (uint32_t)values[8];
    s->offload_frame_bytes = (uint32_t)values[9];
    s->commit_delay_s = (double)values[10] / 1e6;
    s->budget_capacity = values[11];
    pthread_mutex_init(&s->qmu, NULL);
    pthread_mutex_init(&s->smu, NULL);
    pthread_cond_init(&s->scv, NULL);
    s->initialized = 1;
    fcntl(listen_fd, F_SETFL, fcntl(listen_fd, F_GETFL) | O_NONBLOCK);
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    s->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    s->sent_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->epfd < 0 || s->wake_fd < 0 || s->timer_fd < 0 || s->sent_fd < 0 ||
        watch(s, s->sent_fd, &SERVER_SENT_TAG) < 0 ||
        watch(s, listen_fd, &SERVER_LISTEN_TAG) < 0 || watch(s, s->wake_fd, &SERVER_WAKE_TAG) < 0 ||
        watch(s, s->timer_fd, &SERVER_TIMER_TAG) < 0 ||
        (s->log->notify_fd >= 0 && watch(s, s->log->notify_fd, &SERVER_LOG_TAG) < 0)) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return 0;
}

static void wake(Server *s) {
    uint64_t one = 1;
    ssize_t ignored = write(s->wake_fd, &one, sizeof one);
    (void)ignored;
}

static PyObject *s_stop(Server *s, PyObject *unused) {
    pthread_mutex_lock(&s->qmu);
    s->stop_requested = 1;
    pthread_mutex_unlock(&s->qmu);
    wake(s);
    Py_RETURN_NONE;
}

/* complete(conn_id, slot, ticket, data): a deferred call's answer (bytes), or a str: close
 * the connection. Any thread. */
static PyObject *s_complete(Server *s, PyObject *args) {
    unsigned long long conn_id, slot;
    long long ticket;
    PyObject *data;
    if (!PyArg_ParseTuple(args, "KKLO", &conn_id, &slot, &ticket, &data)) return NULL;
    Completion *done = malloc(sizeof *done);
    if (done == NULL) return PyErr_NoMemory();
    *done = (Completion){NULL, conn_id, slot, ticket, Py_NewRef(data)};
    pthread_mutex_lock(&s->qmu);
    Completion **at = &s->completions;
    while (*at != NULL) at = &(*at)->next; /* in order: few are ever queued */
    *at = done;
    pthread_mutex_unlock(&s->qmu);
    wake(s);
    Py_RETURN_NONE;
}

/* age_answers(seconds): make every recorded answer older, as if that time had passed (the
 * commit delay's tests; any thread). */
static PyObject *s_age_answers(Server *s, PyObject *arg) {
    double seconds = PyFloat_AsDouble(arg);
    if (seconds == -1.0 && PyErr_Occurred()) return NULL;
    pthread_mutex_lock(&s->qmu);
    s->age_by += seconds;
    pthread_mutex_unlock(&s->qmu);
    wake(s);
    Py_RETURN_NONE;
}

static PyObject *get_connections(Server *s, void *unused) { return PyLong_FromLong(s->nconns); }

static PyObject *get_waiting(Server *s, void *unused) {
    int n = 0;
    for (Conn *c = s->waiting; c != NULL; c = c->wnext) n += !c->dead;
    return PyLong_FromLong(n);
}

static PyObject *get_budget(Server *s, void *unused) {
    int waiting = 0;
    for (Conn *c = s->budget_head; c != NULL; c = c->bnext) waiting++;
    return Py_BuildValue("Li", (long long)s->budget_used, waiting);
}

static PyObject *get_stats(Server *s, void *unused) {
    return Py_BuildValue("LL", (long long)s->stat_native, (long long)s->stat_generic);
}

static PyObject *get_rounds(Server *s, void *unused) {
    /* the loop updates these holding the GIL, as this getter runs */
    return Py_BuildValue("Lddd", (long long)s->stat_rounds, s->stat_round_sync,
                         s->stat_round_fanout, s->stat_round_gather);
}

static PyObject *get_send_batches(Server *s, void *unused) {
    pthread_mutex_lock(&s->smu);
    long long unfinished = (long long)s->stat_unfinished;
    pthread_mutex_unlock(&s->smu);
    return Py_BuildValue("LLL", (long long)s->stat_batches, (long long)s->stat_batched, unfinished);
}

/* set_state(n): the manager's run state, 0 running, 1 not running, 2 failed (the manager
 * calls it on each transition, txn/native/server.py). */
static PyObject *s_set_state(Server *s, PyObject *arg) {
    long st = PyLong_AsLong(arg);
    if (st == -1 && PyErr_Occurred()) return NULL;
    if (st < 0 || st > 2) {
        PyErr_SetString(PyExc_ValueError, "state must be 0, 1 or 2");
        return NULL;
    }
    s->run_state = (int)st;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"set_state", (PyCFunction)s_set_state, METH_O,
     "The manager's run state: 0 running, 1 not running, 2 failed (any thread)."},
    {"serve", (PyCFunction)server_serve, METH_NOARGS,
     "Run the loop in this thread until stop() and the connections have drained."},
    {"stop", (PyCFunction)s_stop, METH_NOARGS, "Stop accepting and drain (any thread)."},
    {"complete", (PyCFunction)s_complete, METH_VARARGS, "A deferred call's answer (any thread)."},
    {"age_answers", (PyCFunction)s_age_answers, METH_O,
     "Age the commit delay's recorded answers by the seconds given (tests; any thread)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef getset[] = {
    {"connections", (getter)get_connections, NULL, NULL, NULL},
    {"waiting", (getter)get_waiting, NULL, "connections with replies parked until durable", NULL},
    {"budget", (getter)get_budget, NULL, "(frame-budget bytes held, connections waiting)", NULL},
    {"stats", (getter)get_stats, NULL, "(calls answered in C, calls sent to Python)", NULL},
    {"rounds", (getter)get_rounds, NULL,
     "(flush rounds, seconds syncing, handing out replies, gathering calls in them)", NULL},
    {"send_batches", (getter)get_send_batches, NULL,
     "(batches handed to the send thread, connections in them, sends it left unfinished)",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* Descriptors are -1 until init opens them: a Server freed without init closes nothing. */
static PyObject *server_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    Server *s = (Server *)type->tp_alloc(type, 0);
    if (s != NULL) s->epfd = s->wake_fd = s->timer_fd = s->listen_fd = s->sent_fd = -1;
    return (PyObject *)s;
}

/* The dispatcher and on_close are bound methods of the Python server that owns this one:
 * a cycle the collector must see. */
static int server_traverse(Server *s, visitproc visit, void *arg) {
    Py_VISIT(s->machine);
    Py_VISIT(s->log);
    Py_VISIT(s->lock);
    Py_VISIT(s->clock);
    Py_VISIT(s->dispatch);
    Py_VISIT(s->on_close);
    Py_VISIT(s->cfg.default_client);
    return 0;
}

/* Breaks a cycle through the Python callables (a cleared Server is never served again: the
 * loop holds a reference while it runs). */
static int server_clear(Server *s) {
    Py_CLEAR(s->dispatch);
    Py_CLEAR(s->on_close);
    return 0;
}

static void server_dealloc(Server *s) {
    PyObject_GC_UnTrack(s);
    while (s->conns != NULL) conn_close(s, s->conns, NULL);
    while (s->graveyard != NULL) {
        Conn *c = s->graveyard;
        s->graveyard = c->next;
        free(c);
    }
    while (s->held != NULL) {
        Held *h = s->held;
        s->held = h->next;
        free(h);
    }
    while (s->completions != NULL) {
        Completion *c = s->completions;
        s->completions = c->next;
        Py_DECREF(c->data);
        free(c);
    }
    int fds[] = {s->epfd, s->listen_fd, s->wake_fd, s->timer_fd, s->sent_fd};
    for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
        if (fds[i] >= 0) close(fds[i]);
    Py_XDECREF(s->machine);
    Py_XDECREF(s->log);
    Py_XDECREF(s->lock);
    Py_XDECREF(s->clock);
    Py_XDECREF(s->dispatch);
    Py_XDECREF(s->on_close);
    Py_XDECREF(s->cfg.default_client);
    buf_free(&s->scratch);
    if (s->initialized) {
        pthread_mutex_destroy(&s->qmu);
        pthread_mutex_destroy(&s->smu);
        pthread_cond_destroy(&s->scv);
    }
    Py_TYPE(s)->tp_free((PyObject *)s);
}

PyTypeObject ServerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "txn.native._core.Server",
    .tp_basicsize = sizeof(Server),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The native Thrift server (see txn/native/server.py).",
    .tp_new = server_new,
    .tp_traverse = (traverseproc)server_traverse,
    .tp_clear = (inquiry)server_clear,
    .tp_init = (initproc)server_init,
    .tp_dealloc = (destructor)server_dealloc,
    .tp_methods = methods,
    .tp_getset = getset,
};
