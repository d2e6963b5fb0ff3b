/* The state and primitive transitions of txn/machine.py in C (see machine.h). Each
 * transition reserves the memory it needs before it changes anything, so that running out
 * of memory leaves the state as it was. */
#include "machine.h"

/* -- helpers ------------------------------------------------------------------------ */

static int grow(void **array, Py_ssize_t *cap, Py_ssize_t need, size_t item) {
    if (need <= *cap) return 0;
    Py_ssize_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *p = realloc(*array, (size_t)c * item);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *array = p;
    *cap = c;
    return 0;
}

static Py_ssize_t i64_lower(const int64_t *v, Py_ssize_t n, int64_t x) {
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (v[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static Py_ssize_t ip_lower(const Machine *m, int64_t wp) {
    Py_ssize_t lo = 0, hi = m->nip;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (m->ip[mid].wp < wp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static Py_ssize_t slot_lower(const SetSlot *s, Py_ssize_t lo, Py_ssize_t hi, int64_t id) {
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (s[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void entry_clear(Entry *e) {
    free(e->cps);
    e->cps = NULL;
    e->ncps = 0;
    Py_CLEAR(e->client);
}

/* -- queries ------------------------------------------------------------------------ */

Py_ssize_t machine_find(const Machine *m, int64_t wp) {
    Py_ssize_t i = ip_lower(m, wp);
    return i < m->nip && m->ip[i].wp == wp ? i : -1;
}

int64_t machine_first_short(const Machine *m) {
    for (Py_ssize_t i = 0; i < m->nip; i++)
        if (m->ip[i].type != IP_LONG) return m->ip[i].wp;
    return NO_TX_IN_PROGRESS;
}

int64_t machine_next_write_pointer(const Machine *m, int64_t now_ms) {
    int64_t next = m->last_write_pointer + 1;
    /* now_ms * 1e6 overflows past the year 2262; saturate instead */
    int64_t by_clock = now_ms > INT64_MAX / 1000000 ? INT64_MAX : now_ms * 1000000;
    return by_clock > next ? by_clock : next;
}

SetSlot *machine_committing(const Machine *m, int64_t tx_id) {
    Py_ssize_t i = slot_lower(m->committing, 0, m->ncommitting, tx_id);
    return i < m->ncommitting && m->committing[i].id == tx_id ? &m->committing[i] : NULL;
}

/* The first committed set after tx_id, or cend. */
static Py_ssize_t committed_after(const Machine *m, int64_t tx_id) {
    Py_ssize_t i = slot_lower(m->committed, m->cstart, m->cend, tx_id);
    while (i < m->cend && m->committed[i].id <= tx_id) i++;
    return i;
}

int machine_find_conflict(const Machine *m, int64_t tx_id, const ChangeSet *cs,
                          const unsigned char **key, size_t *len, PyObject **client) {
    if (cs->n == 0) return 0;
    for (Py_ssize_t i = committed_after(m, tx_id); i < m->cend; i++) {
        if (changeset_first_common(m->committed[i].set, cs, key, len)) {
            *client = m->committed[i].set->client;
            return 1;
        }
    }
    return 0;
}

Py_ssize_t machine_committed_keys_after(const Machine *m, int64_t tx_id) {
    Py_ssize_t total = 0;
    for (Py_ssize_t i = committed_after(m, tx_id); i < m->cend; i++)
        total += m->committed[i].set->n;
    return total;
}

int machine_find_conflict_in(const Machine *m, int64_t tx_id, PyObject *keys,
                             const unsigned char **key, size_t *len, PyObject **client) {
    for (Py_ssize_t i = committed_after(m, tx_id); i < m->cend; i++) {
        const ChangeSet *cs = m->committed[i].set;
        for (Py_ssize_t k = 0; k < cs->n; k++) { /* ascending: the first hit is the smallest */
            *key = changeset_key(cs, k, len);
            PyObject *candidate = PyBytes_FromStringAndSize((const char *)*key, (Py_ssize_t)*len);
            int found = candidate == NULL ? -1 : PySet_Contains(keys, candidate);
            Py_XDECREF(candidate);
            if (found != 0) {
                *client = cs->client;
                return found;
            }
        }
    }
    return 0;
}

int machine_in_progress_before(const Machine *m, int64_t wp) {
    return m->nip > 0 && m->ip[0].wp < wp;
}

/* -- in-progress bookkeeping --------------------------------------------------------- */

static void forget_ids(Machine *m) { Py_CLEAR(m->ids_tuple); }
static void forget_invalid(Machine *m) { Py_CLEAR(m->invalid_tuple); }

/* Insert or replace `e` (its cps and client are taken over). Needs room for one more
 * entry (ip_reserve). */
static void add_in_progress(Machine *m, Entry e) {
    Py_ssize_t i = ip_lower(m, e.wp);
    if (i < m->nip && m->ip[i].wp == e.wp) {
        entry_clear(&m->ip[i]);
        m->ip[i] = e;
        return;
    }
    memmove(&m->ip[i + 1], &m->ip[i], (size_t)(m->nip - i) * sizeof(Entry));
    m->ip[i] = e;
    m->nip++;
    forget_ids(m);
    if (e.wp > m->last_write_pointer) m->last_write_pointer = e.wp;
}

static int ip_reserve(Machine *m, Py_ssize_t more) {
    return grow((void **)&m->ip, &m->capip, m->nip + more, sizeof(Entry));
}

/* Remove `wp`; 1 with the entry in *out (the caller owns it), or 0 when absent. */
static int remove_in_progress(Machine *m, int64_t wp, Entry *out) {
    Py_ssize_t i = machine_find(m, wp);
    if (i < 0) return 0;
    *out = m->ip[i];
    memmove(&m->ip[i], &m->ip[i + 1], (size_t)(m->nip - i - 1) * sizeof(Entry));
    m->nip--;
    forget_ids(m);
    return 1;
}

static void drop_in_progress(Machine *m, int64_t wp) {
    Entry e;
    if (remove_in_progress(m, wp, &e)) entry_clear(&e);
}

static void move_read_pointer(Machine *m, int64_t wp) {
    if (wp > m->read_pointer) m->read_pointer = wp;
}

/* -- invalid list -------------------------------------------------------------------- */

static int invalid_reserve(Machine *m, Py_ssize_t more) {
    return grow((void **)&m->invalid, &m->capinvalid, m->ninvalid + more, sizeof(int64_t));
}

/* Needs room (invalid_reserve). */
static void invalid_add(Machine *m, int64_t id) {
    Py_ssize_t i = i64_lower(m->invalid, m->ninvalid, id);
    if (i < m->ninvalid && m->invalid[i] == id) return;
    memmove(&m->invalid[i + 1], &m->invalid[i], (size_t)(m->ninvalid - i) * sizeof(int64_t));
    m->invalid[i] = id;
    m->ninvalid++;
    forget_invalid(m);
}

int machine_invalid_remove(Machine *m, int64_t id) {
    Py_ssize_t i = i64_lower(m->invalid, m->ninvalid, id);
    if (i >= m->ninvalid || m->invalid[i] != id) return 0;
    memmove(&m->invalid[i], &m->invalid[i + 1], (size_t)(m->ninvalid - i - 1) * sizeof(int64_t));
    m->ninvalid--;
    forget_invalid(m);
    return 1;
}

int machine_is_invalid(const Machine *m, int64_t id) {
    Py_ssize_t i = i64_lower(m->invalid, m->ninvalid, id);
    return i < m->ninvalid && m->invalid[i] == id;
}

static int invalid_remove_below(Machine *m, int64_t bound) {
    Py_ssize_t cut = i64_lower(m->invalid, m->ninvalid, bound);
    if (cut == 0) return 0;
    memmove(m->invalid, &m->invalid[cut], (size_t)(m->ninvalid - cut) * sizeof(int64_t));
    m->ninvalid -= cut;
    forget_invalid(m);
    return 1;
}

/* -- change sets ----------------------------------------------------------------------- */

static ChangeSet *committing_pop(Machine *m, int64_t tx_id) {
    Py_ssize_t i = slot_lower(m->committing, 0, m->ncommitting, tx_id);
    if (i >= m->ncommitting || m->committing[i].id != tx_id) return NULL;
    ChangeSet *cs = m->committing[i].set;
    memmove(&m->committing[i], &m->committing[i + 1],
            (size_t)(m->ncommitting - i - 1) * sizeof(SetSlot));
    m->ncommitting--;
    return cs;
}

int machine_committing_set(Machine *m, int64_t tx_id, ChangeSet *cs) {
    SetSlot *slot = machine_committing(m, tx_id);
    if (slot != NULL) {
        changeset_free(slot->set);
        slot->set = cs;
        return 0;
    }
    if (grow((void **)&m->committing, &m->capcommitting, m->ncommitting + 1, sizeof(SetSlot))) {
        changeset_free(cs);
        return -1;
    }
    Py_ssize_t i = slot_lower(m->committing, 0, m->ncommitting, tx_id);
    memmove(&m->committing[i + 1], &m->committing[i],
            (size_t)(m->ncommitting - i) * sizeof(SetSlot));
    m->committing[i] = (SetSlot){tx_id, cs};
    m->ncommitting++;
    return 0;
}

/* Room for one more committed set, compacting the dropped prefix first. */
static int committed_reserve(Machine *m) {
    if (m->cend < m->capcommitted) return 0;
    if (m->cstart > 0) {
        memmove(m->committed, &m->committed[m->cstart],
                (size_t)(m->cend - m->cstart) * sizeof(SetSlot));
        m->cend -= m->cstart;
        m->cstart = 0;
        return 0;
    }
    return grow((void **)&m->committed, &m->capcommitted, m->cend + 1, sizeof(SetSlot));
}

/* Record `cs` (taken over) as committed at `pointer`, merged with a set already there.
 * Needs committed_reserve; -1 only when the merge runs out of memory (cs is freed). */
static int committed_add(Machine *m, int64_t pointer, ChangeSet *cs) {
    Py_ssize_t i = slot_lower(m->committed, m->cstart, m->cend, pointer);
    if (i < m->cend && m->committed[i].id == pointer) {
        ChangeSet *merged = changeset_union(m->committed[i].set, cs, cs->client);
        changeset_free(cs);
        if (merged == NULL) return -1;
        changeset_free(m->committed[i].set);
        m->committed[i].set = merged;
        return 0;
    }
    memmove(&m->committed[i + 1], &m->committed[i], (size_t)(m->cend - i) * sizeof(SetSlot));
    m->committed[i] = (SetSlot){pointer, cs};
    m->cend++;
    return 0;
}

static void committed_remove_below(Machine *m, int64_t bound) {
    while (m->cstart < m->cend && m->committed[m->cstart].id < bound) {
        changeset_free(m->committed[m->cstart].set);
        m->cstart++;
    }
    if (m->cstart == m->cend) m->cstart = m->cend = 0;
}

/* -- transitions ------------------------------------------------------------------------ */

int machine_start(Machine *m, int64_t wp, int64_t vub, int64_t expiration, int type,
                  PyObject *client) {
    if (ip_reserve(m, 1)) return -1;
    Py_XINCREF(client);
    add_in_progress(m, (Entry){wp, vub, expiration, type, NULL, 0, client});
    return 0;
}

int machine_commit(Machine *m, int64_t tx_id, ChangeSet *changes, int64_t commit_pointer,
                   int add) {
    if (committed_reserve(m)) {
        if (changes != COMMITTING_SET) changeset_free(changes);
        return -1;
    }
    ChangeSet *committing = committing_pop(m, tx_id);
    if (changes == COMMITTING_SET) changes = committing;
    if (add && changes != NULL && changes->n > 0) {
        changeset_set_client(changes, committing != NULL ? committing->client : NULL);
        if (changes == committing) committing = NULL; /* now owned by the committed sets */
        if (committed_add(m, commit_pointer, changes) < 0) {
            changeset_free(committing);
            return -1;
        }
    } else if (changes != committing) {
        changeset_free(changes);
    }
    changeset_free(committing);
    int64_t wp = tx_id;
    Entry previous;
    if (!remove_in_progress(m, tx_id, &previous)) {
        machine_invalid_remove(m, tx_id); /* a timed-out transaction committed during replay */
    } else {
        if (previous.ncps > 0) {
            wp = previous.cps[previous.ncps - 1];
            for (Py_ssize_t i = 0; i < previous.ncps; i++) drop_in_progress(m, previous.cps[i]);
        }
        entry_clear(&previous);
    }
    move_read_pointer(m, wp);
    committed_remove_below(m, machine_first_short(m));
    return 0;
}

int machine_invalidate(Machine *m, int64_t tx_id) {
    Py_ssize_t i = machine_find(m, tx_id);
    if (invalid_reserve(m, 1 + (i >= 0 ? m->ip[i].ncps : 0))) return -1;
    ChangeSet *previous_changes = committing_pop(m, tx_id);
    Entry previous;
    int was_in_progress = remove_in_progress(m, tx_id, &previous);
    if (!was_in_progress && previous_changes == NULL) return 0; /* committed or unknown */
    changeset_free(previous_changes);
    invalid_add(m, tx_id);
    if (was_in_progress) {
        for (Py_ssize_t k = 0; k < previous.ncps; k++) {
            invalid_add(m, previous.cps[k]);
            drop_in_progress(m, previous.cps[k]);
        }
        if (previous.type != IP_LONG) move_read_pointer(m, tx_id);
        entry_clear(&previous);
    }
    return 1;
}

int machine_abort(Machine *m, int64_t tx_id, const int64_t *cps, Py_ssize_t ncps, int type) {
    if (type == IP_LONG) {
        /* checked before anything changes: invalidating may need memory */
        Py_ssize_t i = machine_find(m, tx_id);
        if (invalid_reserve(m, 1 + (i >= 0 ? m->ip[i].ncps : 0))) return -1;
        changeset_free(committing_pop(m, tx_id));
        return machine_invalidate(m, tx_id) < 0 ? -1 : 0;
    }
    changeset_free(committing_pop(m, tx_id));
    Entry removed;
    if (remove_in_progress(m, tx_id, &removed)) {
        for (Py_ssize_t k = 0; k < removed.ncps; k++) drop_in_progress(m, removed.cps[k]);
        entry_clear(&removed);
    } else if (machine_invalid_remove(m, tx_id)) {
        /* the transaction and its checkpoints were invalidated together */
        for (Py_ssize_t k = 0; k < ncps; k++) machine_invalid_remove(m, cps[k]);
    }
    if (tx_id <= m->last_write_pointer) move_read_pointer(m, tx_id);
    return 0;
}

int machine_checkpoint(Machine *m, int64_t new_wp, int64_t parent_wp) {
    Py_ssize_t i = machine_find(m, parent_wp);
    if (i < 0) return 1; /* not in progress: the caller reports corruption */
    if (ip_reserve(m, 1)) return -1;
    Entry *parent = &m->ip[i];
    int64_t *cps = realloc(parent->cps, (size_t)(parent->ncps + 1) * sizeof(int64_t));
    if (cps == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    cps[parent->ncps] = new_wp;
    parent->cps = cps;
    parent->ncps++;
    PyObject *client = parent->client;
    Py_XINCREF(client);
    add_in_progress(
        m, (Entry){new_wp, parent->vub, parent->expiration, IP_CHECKPOINT, NULL, 0, client});
    return 0;
}

void machine_extend(Machine *m, int64_t tx_id, int64_t expiration) {
    Py_ssize_t i = machine_find(m, tx_id);
    if (i >= 0 && m->ip[i].type != IP_CHECKPOINT) m->ip[i].expiration = expiration;
}

void machine_clear(Machine *m) {
    for (Py_ssize_t i = 0; i < m->nip; i++) entry_clear(&m->ip[i]);
    for (Py_ssize_t i = 0; i < m->ncommitting; i++) changeset_free(m->committing[i].set);
    for (Py_ssize_t i = m->cstart; i < m->cend; i++) changeset_free(m->committed[i].set);
    m->nip = m->ninvalid = m->ncommitting = m->cstart = m->cend = 0;
    m->read_pointer = m->last_write_pointer = 0;
    forget_ids(m);
    forget_invalid(m);
}

/* Used by restore: appends in ascending order, as the snapshot lists them. */
int machine_restore_committed(Machine *m, int64_t pointer, ChangeSet *cs) {
    if (committed_reserve(m)) {
        changeset_free(cs);
        return -1;
    }
    return committed_add(m, pointer, cs);
}

int machine_truncate_before(Machine *m, int64_t time_ms) {
    if (time_ms > INT64_MAX / 1000000) { /* the bound is past every id */
        int changed = m->ninvalid > 0;
        m->ninvalid = 0;
        forget_invalid(m);
        return changed;
    }
    return invalid_remove_below(m, time_ms < INT64_MIN / 1000000 ? INT64_MIN : time_ms * 1000000);
}

int machine_restore_entry(Machine *m, Entry e) {
    if (ip_reserve(m, 1)) {
        entry_clear(&e);
        return -1;
    }
    add_in_progress(m, e);
    return 0;
}

int machine_restore_invalid(Machine *m, int64_t id) {
    if (invalid_reserve(m, 1)) return -1;
    invalid_add(m, id);
    return 0;
}
