/* Change sets of the native engine (changeset.c). Require the GIL. */
#ifndef TXN_NATIVE_CHANGESET_H
#define TXN_NATIVE_CHANGESET_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* A transaction's change keys, unique and ascending, kept the way a log edit writes them
 * (txn.persist.edit_codec.encode_changes: each key an i32 length and its bytes) in one
 * bytes object, with where each key starts: conflicts are found by binary search, the
 * smallest shared key (the one Python's min() names) comes first, edits copy the blob. */
typedef struct {
    Py_ssize_t n;
    PyObject *blob;      /* owned bytes */
    Py_ssize_t *offsets; /* of each key's bytes in blob (after its length) */
    PyObject *client;    /* who declared them: owned str, or NULL */
} ChangeSet;

static inline const unsigned char *changeset_key(const ChangeSet *cs, Py_ssize_t i,
                                                 size_t *len) {
    const unsigned char *key = (const unsigned char *)PyBytes_AS_STRING(cs->blob) + cs->offsets[i];
    *len = ((size_t)key[-4] << 24) | ((size_t)key[-3] << 16) | ((size_t)key[-2] << 8) | key[-1];
    return key;
}

/* Constructors return NULL with an exception set on failure. */
ChangeSet *changeset_from_buffers(const unsigned char *const *keys, const Py_ssize_t *lens,
                                  Py_ssize_t n, PyObject *client);
/* Keys must be bytes (TypeError otherwise). */
ChangeSet *changeset_from_iterable(PyObject *keys, PyObject *client);
/* From encode_changes' bytes (taken as they are when ascending and unique; else NULL
 * without an exception: build from the keys). */
ChangeSet *changeset_from_encoded(PyObject *blob, Py_ssize_t n, PyObject *client);
ChangeSet *changeset_union(const ChangeSet *a, const ChangeSet *b, PyObject *client);
void changeset_free(ChangeSet *cs);
void changeset_set_client(ChangeSet *cs, PyObject *client);

/* The smallest key in both sets (1, with *key and *len), or 0. */
int changeset_first_common(const ChangeSet *a, const ChangeSet *b, const unsigned char **key,
                           size_t *len);
Py_ssize_t changeset_bytes(const ChangeSet *cs);
PyObject *changeset_frozenset(const ChangeSet *cs);

#endif
