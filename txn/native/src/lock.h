/* The manager's state lock (lock.c): a non-reentrant lock that Python code takes like a
 * threading.Lock (acquire/release/locked, a context manager) and the native server's hot
 * path takes in C, without a call into Python.
 *
 * It is a POSIX semaphore of one, as CPython's own lock is on Linux: uncontended, taking and
 * giving it are one atomic operation each; any thread may release it. Whoever waits for it
 * (Python or C) waits without the GIL, so a holder that needs the GIL can always get it. */
#ifndef TXN_NATIVE_LOCK_H
#define TXN_NATIVE_LOCK_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <semaphore.h>
#include <stdatomic.h>

typedef struct {
    PyObject_HEAD
    sem_t sem;
    atomic_int held; /* 1 while someone holds it: release() of a free lock is an error */
    int ready;
} StateLock;

extern PyTypeObject StateLockType;

/* Take the lock (requires the GIL; waits without it when another thread holds it). */
void state_lock_acquire(StateLock *lock);

/* Give the lock back (requires that the caller's side holds it). */
void state_lock_release(StateLock *lock);

#endif
