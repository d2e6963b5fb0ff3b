/* See changeset.h. */
#include "changeset.h"

#include "buf.h"

typedef struct {
    const unsigned char *p;
    size_t len;
} Key;

static int key_cmp(const unsigned char *a, size_t la, const unsigned char *b, size_t lb) {
    int c = memcmp(a, b, la < lb ? la : lb);
    if (c != 0) return c;
    return la < lb ? -1 : la > lb;
}

static int key_sort_cmp(const void *a, const void *b) {
    const Key *x = a, *y = b;
    return key_cmp(x->p, x->len, y->p, y->len);
}

static ChangeSet *changeset_alloc(Py_ssize_t n, PyObject *client) {
    ChangeSet *cs = calloc(1, sizeof *cs);
    Py_ssize_t *offsets = malloc((size_t)(n ? n : 1) * sizeof(Py_ssize_t));
    if (cs == NULL || offsets == NULL) {
        free(cs);
        free(offsets);
        PyErr_NoMemory();
        return NULL;
    }
    cs->offsets = offsets;
    cs->client = Py_XNewRef(client);
    return cs;
}

void changeset_free(ChangeSet *cs) {
    if (cs == NULL) return;
    Py_XDECREF(cs->blob);
    free(cs->offsets);
    Py_XDECREF(cs->client);
    free(cs);
}

void changeset_set_client(ChangeSet *cs, PyObject *client) {
    Py_XINCREF(client);
    Py_XSETREF(cs->client, client);
}

/* A change set of `n` keys already ascending and unique. */
static ChangeSet *changeset_of_sorted(const Key *keys, Py_ssize_t n, PyObject *client) {
    size_t size = 0;
    for (Py_ssize_t i = 0; i < n; i++) size += 4 + keys[i].len;
    ChangeSet *cs = changeset_alloc(n, client);
    if (cs == NULL) return NULL;
    cs->blob = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (cs->blob == NULL) {
        changeset_free(cs);
        return NULL;
    }
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(cs->blob), *at = out;
    for (Py_ssize_t i = 0; i < n; i++) {
        set_be32(at, (uint32_t)keys[i].len);
        memcpy(at + 4, keys[i].p, keys[i].len);
        cs->offsets[i] = (at + 4) - out;
        at += 4 + keys[i].len;
    }
    cs->n = n;
    return cs;
}

/* Sort and drop duplicates (a set on the wire may repeat a key), then build. */
static ChangeSet *changeset_of(Key *keys, Py_ssize_t n, PyObject *client) {
    if (n > 1) qsort(keys, (size_t)n, sizeof(Key), key_sort_cmp);
    Py_ssize_t unique = n > 0 ? 1 : 0;
    for (Py_ssize_t i = 1; i < n; i++)
        if (key_cmp(keys[unique - 1].p, keys[unique - 1].len, keys[i].p, keys[i].len) != 0)
            keys[unique++] = keys[i];
    return changeset_of_sorted(keys, unique, client);
}

ChangeSet *changeset_from_buffers(const unsigned char *const *ptrs, const Py_ssize_t *lens,
                                  Py_ssize_t n, PyObject *client) {
    Key *keys = malloc((size_t)(n ? n : 1) * sizeof(Key));
    if (keys == NULL) return (ChangeSet *)PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) keys[i] = (Key){ptrs[i], (size_t)lens[i]};
    ChangeSet *cs = changeset_of(keys, n, client);
    free(keys);
    return cs;
}

ChangeSet *changeset_from_iterable(PyObject *iterable, PyObject *client) {
    PyObject *seq = PySequence_Fast(iterable, "change keys must be iterable");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    Key *keys = malloc((size_t)(n ? n : 1) * sizeof(Key));
    ChangeSet *cs = NULL;
    if (keys == NULL) {
        PyErr_NoMemory();
    } else {
        Py_ssize_t i = 0;
        for (; i < n; i++) {
            PyObject *key = PySequence_Fast_GET_ITEM(seq, i);
            if (!PyBytes_Check(key)) {
                PyErr_Format(PyExc_TypeError, "a change key must be bytes, not %.100s",
                             Py_TYPE(key)->tp_name);
                break;
            }
            keys[i] = (Key){(const unsigned char *)PyBytes_AS_STRING(key),
                            (size_t)PyBytes_GET_SIZE(key)};
        }
        if (i == n) cs = changeset_of(keys, n, client); /* copies: seq may go now */
    }
    free(keys);
    Py_DECREF(seq);
    return cs;
}

ChangeSet *changeset_from_encoded(PyObject *blob, Py_ssize_t n, PyObject *client) {
    if (!PyBytes_Check(blob)) return NULL;
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(blob);
    size_t size = (size_t)PyBytes_GET_SIZE(blob), at = 0;
    ChangeSet *cs = changeset_alloc(n, client);
    if (cs == NULL) return NULL;
    const unsigned char *previous = NULL;
    size_t previous_len = 0;
    Py_ssize_t count = 0;
    while (at < size) {
        if (count == n || size - at < 4) break;
        size_t len = get_be32(data + at);
        if (len > size - at - 4) break;
        const unsigned char *key = data + at + 4;
        if (previous != NULL && key_cmp(previous, previous_len, key, len) >= 0) break;
        cs->offsets[count++] = (Py_ssize_t)(at + 4);
        previous = key;
        previous_len = len;
        at += 4 + len;
    }
    if (at != size || count != n) { /* not what encode_changes writes: use the keys */
        changeset_free(cs);
        return NULL;
    }
    cs->n = n;
    cs->blob = Py_NewRef(blob);
    return cs;
}

static int contains(const ChangeSet *cs, const unsigned char *key, size_t len) {
    Py_ssize_t lo = 0, hi = cs->n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        size_t mlen;
        const unsigned char *m = changeset_key(cs, mid, &mlen);
        int c = key_cmp(m, mlen, key, len);
        if (c == 0) return 1;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

int changeset_first_common(const ChangeSet *a, const ChangeSet *b, const unsigned char **key,
                           size_t *len) {
    const ChangeSet *small = a->n <= b->n ? a : b;
    const ChangeSet *large = small == a ? b : a;
    for (Py_ssize_t i = 0; i < small->n; i++) {
        *key = changeset_key(small, i, len);
        if (contains(large, *key, *len)) return 1;
    }
    return 0;
}

ChangeSet *changeset_union(const ChangeSet *a, const ChangeSet *b, PyObject *client) {
    Key *keys = malloc((size_t)(a->n + b->n ? a->n + b->n : 1) * sizeof(Key));
    if (keys == NULL) return (ChangeSet *)PyErr_NoMemory();
    Py_ssize_t i = 0, j = 0, n = 0;
    while (i < a->n || j < b->n) {
        Key x = {0}, y = {0};
        if (i < a->n) x.p = changeset_key(a, i, &x.len);
        if (j < b->n) y.p = changeset_key(b, j, &y.len);
        int c = i >= a->n ? 1 : j >= b->n ? -1 : key_cmp(x.p, x.len, y.p, y.len);
        keys[n++] = c <= 0 ? x : y;
        i += c <= 0;
        j += c >= 0;
    }
    ChangeSet *cs = changeset_of_sorted(keys, n, client);
    free(keys);
    return cs;
}

Py_ssize_t changeset_bytes(const ChangeSet *cs) { return PyBytes_GET_SIZE(cs->blob) - 4 * cs->n; }

PyObject *changeset_frozenset(const ChangeSet *cs) {
    PyObject *set = PyFrozenSet_New(NULL);
    for (Py_ssize_t i = 0; set != NULL && i < cs->n; i++) {
        size_t len;
        const unsigned char *p = changeset_key(cs, i, &len);
        PyObject *key = PyBytes_FromStringAndSize((const char *)p, (Py_ssize_t)len);
        if (key == NULL || PySet_Add(set, key) < 0) Py_CLEAR(set);
        Py_XDECREF(key);
    }
    return set;
}
