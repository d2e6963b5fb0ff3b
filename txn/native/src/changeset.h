/* Change sets of the native engine (changeset.c). Require the GIL. */
#ifndef TXN_NATIVE_CHANGESET_H
#define TXN_NATIVE_CHANGESET_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Bytes keys sorted ascending without duplicates, and who declared them. */
typedef struct {
    Py_ssize_t n;
    PyObject **keys;  /* owned references to bytes */
    PyObject *client; /* owned str, or NULL */
} ChangeSet;

/* Constructors return NULL with an exception set on failure. */
ChangeSet *changeset_from_buffers(const unsigned char *const *keys, const Py_ssize_t *lens,
                                  Py_ssize_t n, PyObject *client);
/* Keys must be bytes (TypeError otherwise). */
ChangeSet *changeset_from_iterable(PyObject *keys, PyObject *client);
ChangeSet *changeset_union(const ChangeSet *a, const ChangeSet *b, PyObject *client);
void changeset_free(ChangeSet *cs);
void changeset_set_client(ChangeSet *cs, PyObject *client);

int changeset_contains(const ChangeSet *cs, PyObject *key);
/* The smallest key in both sets (borrowed), or NULL. */
PyObject *changeset_first_common(const ChangeSet *a, const ChangeSet *b);
Py_ssize_t changeset_bytes(const ChangeSet *cs);
PyObject *changeset_frozenset(const ChangeSet *cs);

#endif
