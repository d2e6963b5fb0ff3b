/* Change sets: bytes keys kept sorted and unique, so that conflicts are found by binary
 * search and the smallest shared key (the one Python's min() names) comes first. */
#include "changeset.h"

static int key_cmp(PyObject *a, PyObject *b) {
    Py_ssize_t la = PyBytes_GET_SIZE(a), lb = PyBytes_GET_SIZE(b);
    int c = memcmp(PyBytes_AS_STRING(a), PyBytes_AS_STRING(b), (size_t)(la < lb ? la : lb));
    if (c != 0) return c;
    return la < lb ? -1 : la > lb;
}

static int key_sort_cmp(const void *a, const void *b) {
    return key_cmp(*(PyObject *const *)a, *(PyObject *const *)b);
}

static ChangeSet *changeset_alloc(Py_ssize_t cap, PyObject *client) {
    ChangeSet *cs = calloc(1, sizeof *cs);
    if (cs == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    if (cap > 0) {
        cs->keys = malloc((size_t)cap * sizeof(PyObject *));
        if (cs->keys == NULL) {
            free(cs);
            PyErr_NoMemory();
            return NULL;
        }
    }
    cs->client = client;
    Py_XINCREF(client);
    return cs;
}

void changeset_free(ChangeSet *cs) {
    if (cs == NULL) return;
    for (Py_ssize_t i = 0; i < cs->n; i++) Py_DECREF(cs->keys[i]);
    free(cs->keys);
    Py_XDECREF(cs->client);
    free(cs);
}

void changeset_set_client(ChangeSet *cs, PyObject *client) {
    Py_XINCREF(client);
    Py_XSETREF(cs->client, client);
}

/* Sort the keys and drop duplicates (a set on the wire may repeat a key). */
static void changeset_normalize(ChangeSet *cs) {
    if (cs->n < 2) return;
    qsort(cs->keys, (size_t)cs->n, sizeof(PyObject *), key_sort_cmp);
    Py_ssize_t out = 1;
    for (Py_ssize_t i = 1; i < cs->n; i++) {
        if (key_cmp(cs->keys[out - 1], cs->keys[i]) == 0)
            Py_DECREF(cs->keys[i]);
        else
            cs->keys[out++] = cs->keys[i];
    }
    cs->n = out;
}

ChangeSet *changeset_from_buffers(const unsigned char *const *keys, const Py_ssize_t *lens,
                                  Py_ssize_t n, PyObject *client) {
    ChangeSet *cs = changeset_alloc(n, client);
    if (cs == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PyBytes_FromStringAndSize((const char *)keys[i], lens[i]);
        if (key == NULL) {
            changeset_free(cs);
            return NULL;
        }
        cs->keys[cs->n++] = key;
    }
    changeset_normalize(cs);
    return cs;
}

ChangeSet *changeset_from_iterable(PyObject *keys, PyObject *client) {
    PyObject *seq = PySequence_Fast(keys, "change keys must be iterable");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    ChangeSet *cs = changeset_alloc(n, client);
    if (cs == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyBytes_CheckExact(key)) {
            PyErr_Format(PyExc_TypeError, "a change key must be bytes, not %.100s",
                         Py_TYPE(key)->tp_name);
            changeset_free(cs);
            Py_DECREF(seq);
            return NULL;
        }
        Py_INCREF(key);
        cs->keys[cs->n++] = key;
    }
    Py_DECREF(seq);
    changeset_normalize(cs);
    return cs;
}

int changeset_contains(const ChangeSet *cs, PyObject *key) {
    Py_ssize_t lo = 0, hi = cs->n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        int c = key_cmp(cs->keys[mid], key);
        if (c == 0) return 1;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

PyObject *changeset_first_common(const ChangeSet *a, const ChangeSet *b) {
    const ChangeSet *small = a->n <= b->n ? a : b;
    const ChangeSet *large = small == a ? b : a;
    for (Py_ssize_t i = 0; i < small->n; i++)
        if (changeset_contains(large, small->keys[i])) return small->keys[i];
    return NULL;
}

ChangeSet *changeset_union(const ChangeSet *a, const ChangeSet *b, PyObject *client) {
    ChangeSet *cs = changeset_alloc(a->n + b->n, client);
    if (cs == NULL) return NULL;
    Py_ssize_t i = 0, j = 0;
    while (i < a->n || j < b->n) {
        PyObject *key;
        if (j >= b->n) {
            key = a->keys[i++];
        } else if (i >= a->n) {
            key = b->keys[j++];
        } else {
            int c = key_cmp(a->keys[i], b->keys[j]);
            key = c <= 0 ? a->keys[i] : b->keys[j];
            i += c <= 0;
            j += c >= 0;
        }
        Py_INCREF(key);
        cs->keys[cs->n++] = key;
    }
    return cs;
}

Py_ssize_t changeset_bytes(const ChangeSet *cs) {
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < cs->n; i++) total += PyBytes_GET_SIZE(cs->keys[i]);
    return total;
}

PyObject *changeset_frozenset(const ChangeSet *cs) {
    PyObject *set = PyFrozenSet_New(NULL);
    if (set == NULL) return NULL;
    for (Py_ssize_t i = 0; i < cs->n; i++) {
        if (PySet_Add(set, cs->keys[i]) < 0) {
            Py_DECREF(set);
            return NULL;
        }
    }
    return set;
}
