/* The Python face of the native state (txn.native.machine.NativeStateMachine wraps it):
 * primitive types in and out (ints, tuples, bytes, frozensets), no txn value objects. */
#include "machine.h"

static PyObject *client_or_none(PyObject *client) {
    return Py_NewRef(client != NULL ? client : Py_None);
}

static PyObject *keep_client(PyObject *client) { return client == Py_None ? NULL : client; }

/* A METH_O argument as an int64: 0, or -1 with an exception set. */
static int int64_arg(PyObject *arg, long long *out) {
    *out = PyLong_AsLongLong(arg);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

static PyObject *tuple_of(const int64_t *v, Py_ssize_t n) {
    PyObject *t = PyTuple_New(n);
    if (t == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyLong_FromLongLong(v[i]);
        if (x == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, x);
    }
    return t;
}

/* The int64s of an iterable of ints, in its order; *out is malloc'd (free it). */
static Py_ssize_t int64_array(PyObject *ids, int64_t **out) {
    PyObject *seq = PySequence_Fast(ids, "ids must be iterable");
    if (seq == NULL) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int64_t *v = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (v == NULL) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        v[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
        if (v[i] == -1 && PyErr_Occurred()) {
            free(v);
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    *out = v;
    return n;
}

static PyObject *ids_tuple(Machine *m) {
    if (m->ids_tuple == NULL) {
        m->ids_tuple = PyTuple_New(m->nip);
        if (m->ids_tuple == NULL) return NULL;
        for (Py_ssize_t i = 0; i < m->nip; i++) {
            PyObject *x = PyLong_FromLongLong(m->ip[i].wp);
            if (x == NULL) {
                Py_CLEAR(m->ids_tuple);
                return NULL;
            }
            PyTuple_SET_ITEM(m->ids_tuple, i, x);
        }
    }
    return Py_NewRef(m->ids_tuple);
}

static PyObject *invalid_tuple(Machine *m) {
    if (m->invalid_tuple == NULL) m->invalid_tuple = tuple_of(m->invalid, m->ninvalid);
    return Py_XNewRef(m->invalid_tuple);
}

static PyObject *entry_tuple(const Entry *e) {
    PyObject *cps = tuple_of(e->cps, e->ncps);
    if (cps == NULL) return NULL;
    return Py_BuildValue("LLLiNN", (long long)e->wp, (long long)e->vub,
                         (long long)e->expiration, e->type, cps, client_or_none(e->client));
}

/* -- methods ----------------------------------------------------------------------------- */

static PyObject *m_reset(Machine *m, PyObject *arg) {
    long long pointer;
    if (int64_arg(arg, &pointer) < 0) return NULL;
    machine_clear(m);
    m->read_pointer = m->last_write_pointer = pointer;
    Py_RETURN_NONE;
}

static PyObject *m_next_write_pointer(Machine *m, PyObject *arg) {
    long long now;
    if (int64_arg(arg, &now) < 0) return NULL;
    return PyLong_FromLongLong(machine_next_write_pointer(m, now));
}

static PyObject *m_view(Machine *m, PyObject *unused) {
    return Py_BuildValue("LNNL", (long long)m->read_pointer, invalid_tuple(m), ids_tuple(m),
                         (long long)machine_first_short(m));
}

static PyObject *m_entry(Machine *m, PyObject *arg) {
    long long wp;
    if (int64_arg(arg, &wp) < 0) return NULL;
    Py_ssize_t i = machine_find(m, wp);
    if (i < 0) Py_RETURN_NONE;
    return entry_tuple(&m->ip[i]);
}

static PyObject *m_counts(Machine *m, PyObject *unused) {
    return Py_BuildValue("nn", m->nip, m->ninvalid);
}

static PyObject *m_is_invalid(Machine *m, PyObject *arg) {
    long long id;
    if (int64_arg(arg, &id) < 0) return NULL;
    return PyBool_FromLong(machine_is_invalid(m, id));
}

static PyObject *m_committing(Machine *m, PyObject *arg) {
    long long id;
    if (int64_arg(arg, &id) < 0) return NULL;
    SetSlot *slot = machine_committing(m, id);
    if (slot == NULL) Py_RETURN_NONE;
    return Py_BuildValue("NNO", changeset_frozenset(slot->set), client_or_none(slot->set->client),
                         slot->set->blob);
}

static PyObject *m_find_conflict(Machine *m, PyObject *args) {
    long long tx_id;
    PyObject *changes;
    if (!PyArg_ParseTuple(args, "LO", &tx_id, &changes)) return NULL;
    PyObject *client = NULL;
    const unsigned char *key;
    size_t len;
    int found;
    if (PyAnySet_Check(changes) &&
        PySet_GET_SIZE(changes) > machine_committed_keys_after(m, tx_id)) {
        /* a large set against few committed keys: look those up, do not sort the set */
        found = machine_find_conflict_in(m, tx_id, changes, &key, &len, &client);
    } else {
        ChangeSet *cs = changeset_from_iterable(changes, NULL);
        if (cs == NULL) return NULL;
        found = machine_find_conflict(m, tx_id, cs, &key, &len, &client);
        if (found) { /* key points into cs: copy it out before freeing */
            PyObject *r = Py_BuildValue("y#N", key, (Py_ssize_t)len, client_or_none(client));
            changeset_free(cs);
            return r;
        }
        changeset_free(cs);
    }
    if (found < 0) return NULL;
    if (found == 0) Py_RETURN_NONE;
    return Py_BuildValue("y#N", key, (Py_ssize_t)len, client_or_none(client));
}

static PyObject *m_first_short(Machine *m, PyObject *unused) {
    return PyLong_FromLongLong(machine_first_short(m));
}

static PyObject *m_in_progress_before(Machine *m, PyObject *arg) {
    long long wp;
    if (int64_arg(arg, &wp) < 0) return NULL;
    return PyBool_FromLong(machine_in_progress_before(m, wp));
}

static PyObject *m_timed_out(Machine *m, PyObject *arg) {
    long long now;
    if (int64_arg(arg, &now) < 0) return NULL;
    PyObject *out = PyList_New(0);
    for (Py_ssize_t i = 0; out != NULL && i < m->nip; i++) {
        const Entry *e = &m->ip[i];
        if (e->type == IP_CHECKPOINT || !(e->expiration < 0 || now > e->expiration)) continue;
        PyObject *x = PyLong_FromLongLong(e->wp);
        if (x == NULL || PyList_Append(out, x) < 0) Py_CLEAR(out);
        Py_XDECREF(x);
    }
    return out;
}

static PyObject *m_do_start(Machine *m, PyObject *args) {
    long long wp, vub, expiration;
    int type;
    PyObject *client;
    if (!PyArg_ParseTuple(args, "LLLiO", &wp, &vub, &expiration, &type, &client)) return NULL;
    if (machine_start(m, wp, vub, expiration, type, keep_client(client)) < 0) return NULL;
    Py_RETURN_NONE;
}

/* do_committing(tx_id, changes, client, encoded=None): `encoded` is the keys as
 * encode_changes wrote them (a large set encoded ahead of the state lock): taken as the
 * set's blob without sorting again. */
static PyObject *m_do_committing(Machine *m, PyObject *args) {
    long long tx_id;
    PyObject *changes, *client, *encoded = Py_None;
    if (!PyArg_ParseTuple(args, "LOO|O", &tx_id, &changes, &client, &encoded)) return NULL;
    Py_ssize_t n = PyObject_Length(changes);
    if (n < 0) return NULL;
    ChangeSet *cs = encoded == Py_None ? NULL
                                       : changeset_from_encoded(encoded, n, keep_client(client));
    if (cs == NULL && !PyErr_Occurred()) cs = changeset_from_iterable(changes, keep_client(client));
    if (cs == NULL || machine_committing_set(m, tx_id, cs) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *m_do_commit(Machine *m, PyObject *args) {
    long long tx_id, commit_pointer;
    PyObject *changes;
    int add;
    if (!PyArg_ParseTuple(args, "LOLp", &tx_id, &changes, &commit_pointer, &add)) return NULL;
    ChangeSet *cs = changeset_from_iterable(changes, NULL);
    if (cs == NULL || machine_commit(m, tx_id, cs, commit_pointer, add) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *m_do_abort(Machine *m, PyObject *args) {
    long long tx_id;
    PyObject *checkpoints;
    int type;
    if (!PyArg_ParseTuple(args, "LOi", &tx_id, &checkpoints, &type)) return NULL;
    int64_t *cps = NULL;
    Py_ssize_t n = 0;
    if (checkpoints != Py_None && (n = int64_array(checkpoints, &cps)) < 0) return NULL;
    int rc = machine_abort(m, tx_id, cps, n, type);
    free(cps);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *m_do_invalidate(Machine *m, PyObject *arg) {
    long long id;
    if (int64_arg(arg, &id) < 0) return NULL;
    int rc = machine_invalidate(m, id);
    return rc < 0 ? NULL : PyBool_FromLong(rc);
}

static PyObject *m_do_checkpoint(Machine *m, PyObject *args) {
    long long new_wp, parent_wp;
    if (!PyArg_ParseTuple(args, "LL", &new_wp, &parent_wp)) return NULL;
    int rc = machine_checkpoint(m, new_wp, parent_wp);
    return rc < 0 ? NULL : PyBool_FromLong(rc == 0);
}

static PyObject *m_do_extend(Machine *m, PyObject *args) {
    long long tx_id, expiration;
    if (!PyArg_ParseTuple(args, "LL", &tx_id, &expiration)) return NULL;
    machine_extend(m, tx_id, expiration);
    Py_RETURN_NONE;
}

static PyObject *m_do_truncate_invalid(Machine *m, PyObject *arg) {
    int64_t *ids;
    Py_ssize_t n = int64_array(arg, &ids);
    if (n < 0) return NULL;
    int changed = 0;
    for (Py_ssize_t i = 0; i < n; i++) changed |= machine_invalid_remove(m, ids[i]);
    free(ids);
    return PyBool_FromLong(changed);
}

static PyObject *m_do_truncate_invalid_before(Machine *m, PyObject *arg) {
    long long time_ms;
    if (int64_arg(arg, &time_ms) < 0) return NULL;
    return PyBool_FromLong(machine_truncate_before(m, time_ms));
}

static PyObject *sets_list(const SetSlot *slots, Py_ssize_t from, Py_ssize_t to) {
    PyObject *out = PyList_New(0);
    for (Py_ssize_t i = from; out != NULL && i < to; i++) {
        PyObject *item = Py_BuildValue("LN", (long long)slots[i].id,
                                       changeset_frozenset(slots[i].set));
        if (item == NULL || PyList_Append(out, item) < 0) Py_CLEAR(out);
        Py_XDECREF(item);
    }
    return out;
}

static PyObject *m_export(Machine *m, PyObject *unused) {
    PyObject *entries = PyList_New(0);
    for (Py_ssize_t i = 0; entries != NULL && i < m->nip; i++) {
        PyObject *item = entry_tuple(&m->ip[i]);
        if (item == NULL || PyList_Append(entries, item) < 0) Py_CLEAR(entries);
        Py_XDECREF(item);
    }
    if (entries == NULL) return NULL;
    return Py_BuildValue("LLNNNN", (long long)m->read_pointer, (long long)m->last_write_pointer,
                         invalid_tuple(m), entries, sets_list(m->committing, 0, m->ncommitting),
                         sets_list(m->committed, m->cstart, m->cend));
}

/* restore(read pointer, write pointer, invalid ids, entries, committing, committed): the
 * shapes export() returns; replaces the whole state. */
static PyObject *m_restore(Machine *m, PyObject *args) {
    long long rp, lwp;
    PyObject *invalid, *entries, *committing, *committed;
    if (!PyArg_ParseTuple(args, "LLOOOO", &rp, &lwp, &invalid, &entries, &committing,
                          &committed))
        return NULL;
    machine_clear(m);
    int64_t *ids;
    Py_ssize_t n = int64_array(invalid, &ids);
    if (n < 0) return NULL;
    int rc = 0;
    for (Py_ssize_t i = 0; i < n && rc == 0; i++) rc = machine_restore_invalid(m, ids[i]);
    free(ids);
    PyObject *it = rc < 0 ? NULL : PyObject_GetIter(entries), *item;
    while (it != NULL && rc == 0 && (item = PyIter_Next(it)) != NULL) {
        long long wp, vub, expiration;
        int type;
        PyObject *cps_obj, *client;
        int64_t *cps = NULL;
        Py_ssize_t ncps = 0;
        if (!PyArg_ParseTuple(item, "LLLiOO", &wp, &vub, &expiration, &type, &cps_obj, &client) ||
            (ncps = int64_array(cps_obj, &cps)) < 0) {
            rc = -1;
        } else {
            client = keep_client(client);
            Py_XINCREF(client);
            rc = machine_restore_entry(m, (Entry){wp, vub, expiration, type, cps, ncps, client});
        }
        Py_DECREF(item);
    }
    Py_XDECREF(it);
    for (int pass = 0; pass < 2 && rc == 0 && !PyErr_Occurred(); pass++) {
        it = PyObject_GetIter(pass == 0 ? committing : committed);
        while (it != NULL && rc == 0 && (item = PyIter_Next(it)) != NULL) {
            long long id;
            PyObject *keys;
            ChangeSet *cs = NULL;
            if (!PyArg_ParseTuple(item, "LO", &id, &keys) ||
                (cs = changeset_from_iterable(keys, NULL)) == NULL)
                rc = -1;
            else if (pass == 0)
                rc = machine_committing_set(m, id, cs);
            else
                rc = machine_restore_committed(m, id, cs);
            Py_DECREF(item);
        }
        Py_XDECREF(it);
    }
    if (rc < 0 || PyErr_Occurred()) {
        machine_clear(m);
        return NULL;
    }
    m->read_pointer = rp;
    m->last_write_pointer = lwp;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"reset", (PyCFunction)m_reset, METH_O, "Forget everything; both pointers = arg."},
    {"next_write_pointer", (PyCFunction)m_next_write_pointer, METH_O, NULL},
    {"view", (PyCFunction)m_view, METH_NOARGS,
     "(read pointer, invalid ids, in-progress ids, first short in progress)"},
    {"entry", (PyCFunction)m_entry, METH_O,
     "(wp, vub, expiration, type, checkpoints, client) or None"},
    {"counts", (PyCFunction)m_counts, METH_NOARGS, "(in progress, invalid)"},
    {"is_invalid", (PyCFunction)m_is_invalid, METH_O, NULL},
    {"committing", (PyCFunction)m_committing, METH_O, "(changes, client) or None"},
    {"find_conflict", (PyCFunction)m_find_conflict, METH_VARARGS, "(key, client) or None"},
    {"first_short", (PyCFunction)m_first_short, METH_NOARGS, NULL},
    {"in_progress_before", (PyCFunction)m_in_progress_before, METH_O, NULL},
    {"timed_out", (PyCFunction)m_timed_out, METH_O, NULL},
    {"do_start", (PyCFunction)m_do_start, METH_VARARGS, NULL},
    {"do_committing", (PyCFunction)m_do_committing, METH_VARARGS, NULL},
    {"do_commit", (PyCFunction)m_do_commit, METH_VARARGS, NULL},
    {"do_abort", (PyCFunction)m_do_abort, METH_VARARGS, NULL},
    {"do_invalidate", (PyCFunction)m_do_invalidate, METH_O, NULL},
    {"do_checkpoint", (PyCFunction)m_do_checkpoint, METH_VARARGS,
     "False when the parent is not in progress"},
    {"do_extend", (PyCFunction)m_do_extend, METH_VARARGS, "set a transaction's expiration"},
    {"do_truncate_invalid", (PyCFunction)m_do_truncate_invalid, METH_O, NULL},
    {"do_truncate_invalid_before", (PyCFunction)m_do_truncate_invalid_before, METH_O, NULL},
    {"export", (PyCFunction)m_export, METH_NOARGS,
     "(read pointer, write pointer, invalid, entries, committing, committed)"},
    {"restore", (PyCFunction)m_restore, METH_VARARGS, "the inverse of export()"},
    {NULL, NULL, 0, NULL},
};

static PyObject *get_read_pointer(Machine *m, void *unused) {
    return PyLong_FromLongLong(m->read_pointer);
}

static PyObject *get_last_write_pointer(Machine *m, void *unused) {
    return PyLong_FromLongLong(m->last_write_pointer);
}

static PyGetSetDef getset[] = {
    {"read_pointer", (getter)get_read_pointer, NULL, NULL, NULL},
    {"last_write_pointer", (getter)get_last_write_pointer, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static void machine_dealloc(Machine *m) {
    machine_clear(m);
    free(m->ip);
    free(m->invalid);
    free(m->committing);
    free(m->committed);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

PyTypeObject MachineType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "txn.native._core.Machine",
    .tp_basicsize = sizeof(Machine),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The transaction manager's state (see txn/native/machine.py).",
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)machine_dealloc,
    .tp_methods = methods,
    .tp_getset = getset,
};
