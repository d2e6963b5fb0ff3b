/* The manager's state lock: see lock.h. */
#include "lock.h"

#include <errno.h>
#include <math.h>
#include <time.h>

static int try_take(StateLock *lock) {
    while (sem_trywait(&lock->sem) != 0) {
        if (errno != EINTR) return 0; /* EAGAIN: held */
    }
    return 1;
}

static void taken(StateLock *lock) { atomic_store(&lock->held, 1); }

void state_lock_acquire(StateLock *lock) {
    if (!try_take(lock)) {
        Py_BEGIN_ALLOW_THREADS
        while (sem_wait(&lock->sem) != 0) { /* only EINTR: a signal, wait on */
        }
        Py_END_ALLOW_THREADS
    }
    taken(lock);
}

void state_lock_release(StateLock *lock) {
    atomic_store(&lock->held, 0);
    sem_post(&lock->sem);
}

static int lock_init(StateLock *lock, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, ":StateLock", kwlist)) return -1;
    if (lock->ready) {
        PyErr_SetString(PyExc_RuntimeError, "StateLock.__init__ called twice");
        return -1;
    }
    if (sem_init(&lock->sem, 0, 1) != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    atomic_store(&lock->held, 0);
    lock->ready = 1;
    return 0;
}

static void lock_dealloc(StateLock *lock) {
    if (lock->ready) sem_destroy(&lock->sem);
    Py_TYPE(lock)->tp_free((PyObject *)lock);
}

static int check_ready(StateLock *lock) {
    if (lock->ready) return 0;
    PyErr_SetString(PyExc_RuntimeError, "StateLock not initialized");
    return -1;
}

/* Wait up to `timeout` seconds (> 0) without the GIL: 1 taken, 0 timed out. */
static int take_within(StateLock *lock, double timeout) {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    double whole = floor(timeout);
    until.tv_sec += (time_t)whole;
    until.tv_nsec += (long)((timeout - whole) * 1e9);
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec += 1;
        until.tv_nsec -= 1000000000L;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    do {
        rc = sem_clockwait(&lock->sem, CLOCK_MONOTONIC, &until);
    } while (rc != 0 && errno == EINTR);
    Py_END_ALLOW_THREADS
    return rc == 0;
}

/* acquire(blocking=True, timeout=-1) -> bool, as threading.Lock.acquire. */
static PyObject *l_acquire(StateLock *lock, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"blocking", "timeout", NULL};
    int blocking = 1;
    double timeout = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|pd:acquire", kwlist, &blocking, &timeout))
        return NULL;
    if (check_ready(lock) < 0) return NULL;
    if (!blocking && timeout != -1) {
        PyErr_SetString(PyExc_ValueError, "can't specify a timeout for a non-blocking call");
        return NULL;
    }
    if (timeout < 0 && timeout != -1) {
        PyErr_SetString(PyExc_ValueError, "timeout value must be a non-negative number");
        return NULL;
    }
    int got = try_take(lock);
    if (!got && blocking) {
        if (timeout == -1) {
            Py_BEGIN_ALLOW_THREADS
            while (sem_wait(&lock->sem) != 0) {
            }
            Py_END_ALLOW_THREADS
            got = 1;
        } else if (timeout > 0) {
            got = take_within(lock, timeout);
        }
    }
    if (got) taken(lock);
    return PyBool_FromLong(got);
}

static PyObject *l_release(StateLock *lock, PyObject *unused) {
    if (check_ready(lock) < 0) return NULL;
    if (atomic_exchange(&lock->held, 0) == 0) {
        PyErr_SetString(PyExc_RuntimeError, "release unlocked lock");
        return NULL;
    }
    sem_post(&lock->sem);
    Py_RETURN_NONE;
}

static PyObject *l_locked(StateLock *lock, PyObject *unused) {
    return PyBool_FromLong(atomic_load(&lock->held));
}

static PyObject *l_enter(StateLock *lock, PyObject *unused) {
    if (check_ready(lock) < 0) return NULL;
    state_lock_acquire(lock);
    Py_RETURN_TRUE;
}

static PyObject *l_exit(StateLock *lock, PyObject *args) {
    return l_release(lock, NULL);
}

static PyMethodDef lock_methods[] = {
    {"acquire", (PyCFunction)(void (*)(void))l_acquire, METH_VARARGS | METH_KEYWORDS,
     "acquire(blocking=True, timeout=-1) -> bool: as threading.Lock.acquire."},
    {"release", (PyCFunction)l_release, METH_NOARGS, "Give the lock back."},
    {"locked", (PyCFunction)l_locked, METH_NOARGS, "Whether someone holds it."},
    {"__enter__", (PyCFunction)l_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)l_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

PyTypeObject StateLockType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "txn.native._core.StateLock",
    .tp_basicsize = sizeof(StateLock),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The manager's state lock, shared by Python code and the native hot path.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)lock_init,
    .tp_dealloc = (destructor)lock_dealloc,
    .tp_methods = lock_methods,
};
