/* See hot.h. Each call checks everything that could make it fail before it changes the
 * state, reserves the memory it will write into, then changes the state, queues its edit
 * (txn/manager.py's _start, _can_commit, _commit) and writes its reply. */
#include "hot.h"

#include <time.h>

static const struct {
    const char *name;
    int kind;
} HOT_CALLS[] = {
    {"startShort", HOT_START_SHORT},
    {"startLong", HOT_START_LONG},
    {"startShortClientId", HOT_START_SHORT_CLIENT_ID},
    {"startShortWithTimeout", HOT_START_SHORT_TIMEOUT},
    {"startShortWithClientIdAndTimeOut", HOT_START_SHORT_CLIENT_ID_TIMEOUT},
    {"canCommitOrThrow", HOT_CAN_COMMIT},
    {"commitOrThrow", HOT_COMMIT},
};

int hot_kind(const unsigned char *frame, size_t n, CallHead *call) {
    if (parse_call(frame, n, call) < 0) return -1;
    for (size_t i = 0; i < sizeof HOT_CALLS / sizeof HOT_CALLS[0]; i++)
        if (strlen(HOT_CALLS[i].name) == call->name_len &&
            memcmp(HOT_CALLS[i].name, call->name, call->name_len) == 0)
            return HOT_CALLS[i].kind;
    return -1;
}

void client_cache_clear(ClientCache *c) {
    buf_free(&c->raw);
    Py_CLEAR(c->text);
}

/* The client id at frame[start:start+len] as str, or NULL (not UTF-8: the generic path
 * decides). Borrowed from the cache. */
static PyObject *client_text(ClientCache *c, const unsigned char *raw, size_t len) {
    if (c->text != NULL && c->raw.len == len && memcmp(c->raw.data, raw, len) == 0)
        return c->text;
    PyObject *text = PyUnicode_DecodeUTF8((const char *)raw, (Py_ssize_t)len, "strict");
    if (text == NULL) {
        PyErr_Clear();
        return NULL;
    }
    c->raw.len = 0;
    if (buf_reserve(&c->raw, len) < 0) { /* out of memory: decode, do not cache */
        Py_CLEAR(c->text);
        Py_DECREF(text);
        PyErr_Clear();
        return NULL;
    }
    put_raw(&c->raw, raw, len);
    Py_XSETREF(c->text, text);
    return text;
}

static int reserve_reply(Buf *reply, const CallHead *call, size_t result_size) {
    reply->len = 0;
    if (buf_reserve(reply, reply_head_size(call->name_len) + result_size) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* Queue the edit: 1 with the ticket, 0 when the log refuses it (failed, closed: the
 * generic path reports that), -1 when `change` failed (the edit is withdrawn). */
typedef int (*StateChange)(Machine *m, const void *arg);

static int log_edit(Log *log, const EditFields *edit, Machine *m, StateChange change,
                    const void *arg, int64_t *ticket) {
    int64_t sequence;
    Buf *b = log_begin_append(log, record_size(edit), &sequence);
    if (b == NULL) {
        PyErr_Clear();
        return 0;
    }
    size_t keep = b->len;
    put_record(b, sequence, edit);
    if (change(m, arg) < 0) {
        log_cancel_append(log, keep);
        return -1;
    }
    *ticket = log_end_append(log);
    return 1;
}

/* -- start -------------------------------------------------------------------------------- */

typedef struct {
    int64_t wp, vub, expiration;
    int type;
    PyObject *client;
} StartArgs;

static int apply_start(Machine *m, const void *arg) {
    const StartArgs *a = arg;
    return machine_start(m, a->wp, a->vub, a->expiration, a->type, a->client);
}

static int start(int long_tx, int64_t timeout_s, PyObject *client, const CallHead *call,
                 Machine *m, Log *log, const HotConfig *cfg, PyObject *clock, Buf *reply,
                 int64_t *ticket) {
    if (!long_tx && (timeout_s <= 0 || timeout_s > cfg->max_timeout_s)) return 0;
    long long now;
    if (clock == NULL) { /* the wall clock, as txms_common.clock.SystemClock reads it */
        struct timespec t;
        if (clock_gettime(CLOCK_REALTIME, &t) != 0) return -1;
        now = (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
    } else {
        PyObject *now_obj = PyObject_CallNoArgs(clock);
        if (now_obj == NULL) return -1;
        now = PyLong_AsLongLong(now_obj);
        Py_DECREF(now_obj);
        if (now == -1 && PyErr_Occurred()) return -1;
    }
    StartArgs a;
    a.expiration = now + timeout_s * 1000;
    a.wp = machine_next_write_pointer(m, now);
    a.type = long_tx ? IP_LONG : IP_SHORT;
    a.client = cfg->retain == RETAIN_OFF ? NULL : client;
    /* the transaction's snapshot is taken before it joins the in-progress list */
    a.vub = m->nip > 0 ? m->ip[0].wp - 1 : (a.wp - 1 < m->read_pointer ? a.wp - 1 : m->read_pointer);
    size_t result = tx_result_size((size_t)m->ninvalid, (size_t)m->nip, 0);
    if (reserve_reply(reply, call, result) < 0) return -1;
    put_reply_head(reply, call, result);
    put_tx_result(reply, a.wp, m->read_pointer, m->invalid, (size_t)m->ninvalid,
                  m->nip > 0 ? &m->ip[0].wp : NULL, sizeof(Entry), (size_t)m->nip, machine_first_short(m), long_tx,
                  a.wp);
    EditFields edit = {EDIT_INPROGRESS, a.wp, a.expiration, 0, a.vub, 0, a.type, NULL};
    return log_edit(log, &edit, m, apply_start, &a, ticket);
}

/* -- canCommitOrThrow --------------------------------------------------------------------- */

typedef struct {
    int64_t tx;
    ChangeSet *cs;
} CommittingArgs;

static int apply_committing(Machine *m, const void *arg) {
    const CommittingArgs *a = arg;
    return machine_committing_set(m, a->tx, a->cs); /* takes cs, even on failure */
}

static int can_commit(const CallHead *call, const unsigned char *f, size_t n, Machine *m,
                      Log *log, const HotConfig *cfg, Buf *reply, int64_t *ticket) {
    int64_t tx;
    int32_t count;
    if (args_can_commit(f, n, call->args, &tx, &count) < 0) return 0;
    Py_ssize_t i = machine_find(m, tx);
    if (i < 0 || count > cfg->count_limit || count > cfg->count_warn) return 0;
    /* the limits count the keys as sent, duplicates included (as the manager does) */
    const unsigned char **keys = malloc((size_t)(count ? count : 1) * sizeof *keys);
    Py_ssize_t *lens = malloc((size_t)(count ? count : 1) * sizeof *lens);
    ChangeSet *cs = NULL;
    int64_t size = 0;
    if (keys != NULL && lens != NULL) {
        size_t at = call->args + 19, len;
        for (int32_t k = 0; k < count; k++) {
            keys[k] = key_at(f, &at, &len);
            lens[k] = (Py_ssize_t)len;
            size += (int64_t)len;
        }
        if (size <= cfg->size_limit && size <= cfg->size_warn)
            cs = changeset_from_buffers(keys, lens, count, NULL);
    } else {
        PyErr_NoMemory();
    }
    free(keys);
    free(lens);
    if (cs == NULL) return PyErr_Occurred() ? -1 : 0;
    PyObject *client = NULL;
    const unsigned char *key;
    size_t len;
    if (machine_find_conflict(m, tx, cs, &key, &len, &client)) {
        changeset_free(cs);
        return 0;
    }
    changeset_set_client(cs, cfg->retain == RETAIN_COMMITTED ? m->ip[i].client : NULL);
    if (reserve_reply(reply, call, 1) < 0) {
        changeset_free(cs);
        return -1;
    }
    put_reply_head(reply, call, 1);
    put_u8(reply, 0); /* an empty result struct: void */
    EditFields edit = {EDIT_COMMITTING, tx, 0, 0, 0, 0, -1, cs};
    CommittingArgs a = {tx, cs};
    int rc = log_edit(log, &edit, m, apply_committing, &a, ticket);
    if (rc == 0) changeset_free(cs); /* not handed over */
    return rc;
}

/* -- commitOrThrow ------------------------------------------------------------------------ */

typedef struct {
    int64_t tx, commit_pointer;
    int add;
} CommitArgs;

static int apply_commit(Machine *m, const void *arg) {
    const CommitArgs *a = arg;
    return machine_commit(m, a->tx, COMMITTING_SET, a->commit_pointer, a->add);
}

static int commit(const CallHead *call, const unsigned char *f, size_t n, Machine *m, Log *log,
                  Buf *reply, int64_t *ticket) {
    int64_t tx, wp;
    if (args_commit(f, n, call->args, &tx, &wp) < 0) return 0;
    /* the manager knows the transaction's write pointers: wp is not used (machine.py) */
    if (machine_find(m, tx) < 0) return 0;
    SetSlot *committing = machine_committing(m, tx);
    PyObject *client = NULL;
    const unsigned char *key;
    size_t len;
    if (committing != NULL &&
        machine_find_conflict(m, tx, committing->set, &key, &len, &client))
        return 0;
    if (reserve_reply(reply, call, 1) < 0) return -1;
    put_reply_head(reply, call, 1);
    put_u8(reply, 0);
    CommitArgs a = {tx, m->last_write_pointer + 1, committing != NULL};
    EditFields edit = {EDIT_COMMITTED, tx,    0,  a.commit_pointer, 0,
                       a.add,          -1,    committing != NULL ? committing->set : NULL};
    return log_edit(log, &edit, m, apply_commit, &a, ticket);
}

/* -- dispatch ------------------------------------------------------------------------------ */

int hot_run(int kind, const CallHead *call, const unsigned char *f, size_t n, Machine *m,
            Log *log, const HotConfig *cfg, PyObject *clock, ClientCache *cache, Buf *reply,
            int64_t *ticket) {
    size_t start_at, len;
    int32_t timeout;
    PyObject *client;
    switch (kind) {
    case HOT_START_SHORT:
    case HOT_START_LONG:
        if (args_none(f, n, call->args) < 0) return 0;
        return start(kind == HOT_START_LONG,
                     kind == HOT_START_LONG ? cfg->long_timeout_s : cfg->default_timeout_s,
                     cfg->default_client, call, m, log, cfg, clock, reply, ticket);
    case HOT_START_SHORT_CLIENT_ID:
        if (args_client_id(f, n, call->args, &start_at, &len) < 0) return 0;
        if ((client = client_text(cache, f + start_at, len)) == NULL) return 0;
        return start(0, cfg->default_timeout_s, client, call, m, log, cfg, clock, reply, ticket);
    case HOT_START_SHORT_TIMEOUT:
        if (args_timeout(f, n, call->args, &timeout) < 0) return 0;
        return start(0, timeout, cfg->default_client, call, m, log, cfg, clock, reply, ticket);
    case HOT_START_SHORT_CLIENT_ID_TIMEOUT:
        if (args_client_id_timeout(f, n, call->args, &start_at, &len, &timeout) < 0) return 0;
        if ((client = client_text(cache, f + start_at, len)) == NULL) return 0;
        return start(0, timeout, client, call, m, log, cfg, clock, reply, ticket);
    case HOT_CAN_COMMIT:
        return can_commit(call, f, n, m, log, cfg, reply, ticket);
    case HOT_COMMIT:
        return commit(call, f, n, m, log, reply, ticket);
    default:
        return 0;
    }
}
