/* Connections of the native server: reading and framing, running each frame (the hot
 * path in C, anything else through the Python dispatcher), and sending replies in request
 * order once they are computed and durable. Runs on the loop thread with the GIL. */
#include "server.h"

#include <errno.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>


#define READ_CHUNK 65536

Conn *conn_new(Server *s, int fd) {
    Conn *c = calloc(1, sizeof *c);
    if (c == NULL) return NULL;
    c->fd = fd;
    c->id = ++s->next_id;
    c->events = EPOLLIN;
    c->last_rx = monotonic_now();
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
        free(c);
        return NULL;
    }
    c->next = s->conns;
    if (s->conns != NULL) s->conns->prev = c;
    s->conns = c;
    s->nconns++;
    return c;
}

void conn_set_events(Server *s, Conn *c, uint32_t events) {
    if (c->dead || events == c->events) return;
    struct epoll_event ev = {.events = events, .data.ptr = c};
    epoll_ctl(s->epfd, EPOLL_CTL_MOD, c->fd, &ev);
    c->events = events;
}

/* Reading goes on unless the server stops, an offloaded call runs, the unfinished frame
 * waits for the frame budget, or replies wait for a client that does not read them. */
static void conn_update_events(Server *s, Conn *c) {
    int sending = conn_sending_out(c);
    uint32_t events = conn_paused_by_server(c) ? 0 : EPOLLIN;
    conn_set_events(s, c, events | (sending ? EPOLLOUT : 0));
}

void conn_resumed(Server *s, Conn *c) {
    if (!c->dead) conn_update_events(s, c);
}

static void free_replies(Conn *c) {
    while (c->head != NULL) {
        Reply *r = c->head;
        c->head = r->next;
        buf_free(&r->data);
        free(r);
    }
    c->tail = NULL;
}

void conn_close(Server *s, Conn *c, const char *reason) {
    if (c->dead) return;
    if (reason != NULL && s->on_close != NULL) {
        PyObject *r = PyObject_CallFunction(s->on_close, "s", reason);
        if (r == NULL) PyErr_WriteUnraisable(s->on_close);
        Py_XDECREF(r);
    }
    c->dead = 1;
    budget_forget(s, c);
    Held *held = c->blocked && c->reserved ? malloc(sizeof *held) : NULL;
    if (held != NULL) { /* the offloaded call still holds its frame: released when it ends */
        *held = (Held){s->held, c->blocked_slot, c->reserved};
        s->held = held;
        c->reserved = 0;
    }
    budget_give_back(s, c);
    epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    if (c->tx) { /* the send thread is using the descriptor: closed when it is done */
        s->tx_attention = 1;
    } else {
        close(c->fd);
        c->fd = -1;
        buf_free(&c->out);
    }
    free_replies(c);
    buf_free(&c->in);
    client_cache_clear(&c->client);
    server_answered(s, c, 0);
    if (c->prev != NULL) c->prev->next = c->next;
    else s->conns = c->next;
    if (c->next != NULL) c->next->prev = c->prev;
    c->prev = NULL;
    c->next = s->graveyard; /* freed by the loop once nothing refers to it (server.c) */
    s->graveyard = c;
    s->nconns--;
}

Reply *conn_push_reply(Conn *c, int64_t ticket, const Buf *data) {
    Reply *r = calloc(1, sizeof *r);
    if (r == NULL) return NULL;
    r->ticket = ticket;
    if (data != NULL) {
        if (buf_reserve(&r->data, data->len) < 0) {
            free(r);
            return NULL;
        }
        put_raw(&r->data, data->data, data->len);
        r->ready = 1;
    }
    if (c->tail != NULL) c->tail->next = r;
    else c->head = r;
    c->tail = r;
    return r;
}

/* -- running frames ---------------------------------------------------------------------- */

/* The hot path under the manager's lock: 1 answered, 0 take the generic path. */
static int run_hot(Server *s, Conn *c, int kind, const CallHead *call,
                   const unsigned char *frame, size_t n) {
    if (s->run_state != 0) return 0; /* not running: the generic path answers */
    state_lock_acquire(s->lock);
    int64_t ticket = 0;
    int rc = 0;
    if (s->run_state == 0) /* again: a transition may have happened while we waited */
        rc = hot_run(kind, call, frame, n, s->machine, s->log, &s->cfg, s->clock, &c->client,
                     &s->scratch, &ticket);
    state_lock_release(s->lock);
    if (rc < 0 || PyErr_Occurred()) { /* out of memory, or the clock failed: let the generic
                                         path meet (and report) the same */
        PyErr_Clear();
        return 0;
    }
    if (rc == 1) {
        if (conn_push_reply(c, ticket, &s->scratch) == NULL) {
            conn_close(s, c, "out of memory");
            return 1;
        }
        s->stat_native++;
    }
    return rc;
}

/* The generic path: the Python dispatcher answers now (ticket, reply), later (False: a
 * worker calls complete()), or wants the connection closed (a str: why). */
static void run_generic(Server *s, Conn *c, const unsigned char *frame, size_t n, int offload) {
    Reply *slot = conn_push_reply(c, 0, NULL);
    if (slot == NULL) {
        conn_close(s, c, "out of memory");
        return;
    }
    slot->slot = ++s->next_id;
    s->stat_generic++;
    PyObject *answer = PyObject_CallFunction(s->dispatch, "y#KKi", frame, (Py_ssize_t)n,
                                             (unsigned long long)c->id,
                                             (unsigned long long)slot->slot, offload);
    if (answer == NULL) {
        PyErr_WriteUnraisable(s->dispatch);
        conn_close(s, c, "internal error in the dispatcher");
    } else if (PyUnicode_Check(answer)) {
        conn_close(s, c, PyUnicode_AsUTF8(answer));
    } else if (answer == Py_False) {
        if (offload) {
            c->blocked = 1;
            c->blocked_slot = slot->slot;
            if (c->reserved == 0) { /* the frame is held until the call ends */
                s->budget_used += (int64_t)n;
                c->reserved = (int64_t)n;
            }
        }
    } else {
        long long ticket;
        const char *data;
        Py_ssize_t len;
        if (!PyArg_ParseTuple(answer, "Ly#", &ticket, &data, &len) ||
            buf_reserve(&slot->data, (size_t)len) < 0) {
            PyErr_Clear();
            conn_close(s, c, "bad answer from the dispatcher");
        } else {
            put_raw(&slot->data, data, (size_t)len);
            slot->ticket = ticket;
            slot->ready = 1;
        }
    }
    Py_XDECREF(answer);
}

static void run_frames(Server *s, Conn *c) {
    size_t pos = 0;
    while (!c->dead && !c->blocked && c->in.len - pos >= 4) {
        int32_t size = (int32_t)get_be32(c->in.data + pos);
        if (size <= 0 || (uint32_t)size > s->max_frame_bytes) {
            char reason[64];
            snprintf(reason, sizeof reason, "bad frame length %d", size);
            conn_close(s, c, reason);
            return;
        }
        if (c->in.len - pos - 4 < (size_t)size) break;
        const unsigned char *frame = c->in.data + pos + 4;
        pos += 4 + (size_t)size;
        if ((uint32_t)size >= s->offload_frame_bytes) {
            run_generic(s, c, frame, (size_t)size, 1);
            continue;
        }
        CallHead call;
        int kind = hot_kind(frame, (size_t)size, &call);
        if (kind < 0 || !run_hot(s, c, kind, &call, frame, (size_t)size))
            run_generic(s, c, frame, (size_t)size, 0);
        if (!c->dead) budget_give_back(s, c); /* the frame is done with */
    }
    if (c->dead) return;
    memmove(c->in.data, c->in.data + pos, c->in.len - pos);
    c->in.len -= pos;
    if (c->in.len == 0) {
        c->partial_since = 0;
    } else if (!c->blocked) { /* an unfinished frame: hold the budget for all of it */
        if (c->partial_since == 0) c->partial_since = monotonic_now();
        if (c->reserved == 0 && !c->budget_wait && c->in.len >= 4)
            budget_reserve(s, c, (int32_t)get_be32(c->in.data));
    }
}

void conn_readable(Server *s, Conn *c) {
    if (c->dead || conn_paused_by_server(c)) return;
    size_t want = READ_CHUNK;
    if (c->in.len >= 4) { /* room for the rest of a frame begun */
        int32_t size = (int32_t)get_be32(c->in.data);
        if (size > 0 && (uint32_t)size <= s->max_frame_bytes && (size_t)size + 4 > c->in.len)
            want = (size_t)size + 4 - c->in.len;
    }
    if (buf_reserve(&c->in, want) < 0) {
        conn_close(s, c, "out of memory");
        return;
    }
    ssize_t got = recv(c->fd, c->in.data + c->in.len, c->in.cap - c->in.len, 0);
    if (got == 0) {
        conn_close(s, c, NULL); /* the client went away */
        return;
    }
    if (got < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) conn_close(s, c, NULL);
        return;
    }
    c->in.len += (size_t)got;
    c->last_rx = monotonic_now();
    server_answered(s, c, 0); /* it called again: the commit delay need not wait for it */
    run_frames(s, c);
    if (!c->dead) {
        conn_send(s, c, log_synced(s->log));
        conn_update_events(s, c);
    }
}

void conn_unblock(Server *s, Conn *c) {
    c->blocked = 0;
    budget_give_back(s, c);
    run_frames(s, c);
    if (!c->dead) conn_update_events(s, c);
}

/* -- sending ----------------------------------------------------------------------------- */

static void try_send(Server *s, Conn *c) {
    while (c->out_sent < c->out.len) {
        ssize_t n = send(c->fd, c->out.data + c->out_sent, c->out.len - c->out_sent,
                         MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) conn_close(s, c, NULL);
            return;
        }
        c->out_sent += (size_t)n;
    }
    c->out.len = c->out_sent = 0;
}

void conn_send(Server *s, Conn *c, int64_t synced) {
    if (c->dead) return;
    if (c->tx) { /* the send thread has out: what is due waits for it (sender.c) */
        if (c->draining || (c->head != NULL && c->head->ready && c->head->ticket <= synced))
            s->tx_attention = 1;
        if (c->head != NULL) server_park(s, c);
        return;
    }
    int sent = 0;
    while (c->head != NULL && c->head->ready && c->head->ticket <= synced) {
        Reply *r = c->head;
        if (r->close_after) {
            conn_close(s, c, "the call's answer closes the connection");
            return;
        }
        if (buf_reserve(&c->out, r->data.len) < 0) {
            conn_close(s, c, "out of memory");
            return;
        }
        put_raw(&c->out, r->data.data, r->data.len);
        c->head = r->next;
        if (c->head == NULL) c->tail = NULL;
        buf_free(&r->data);
        free(r);
        sent = 1;
    }
    if (sent && s->sender_started && c->out_sent == 0) sender_queue(s, c); /* sent this round */
    else if (sent) try_send(s, c);
    if (c->dead) return;
    if (c->head != NULL) {
        server_park(s, c);
    } else {
        if (sent) server_answered(s, c, 1);
        if (c->draining && c->out.len == 0) {
            conn_close(s, c, NULL);
            return;
        }
    }
    conn_update_events(s, c);
}

/* After the send thread (or the loop, for a small round) had c's out: send what is left,
 * then whatever became due meanwhile. */
void conn_sent(Server *s, Conn *c, int64_t synced) {
    try_send(s, c);
    if (!c->dead) conn_send(s, c, synced);
}

void conn_writable(Server *s, Conn *c) {
    if (c->dead || c->queued || c->tx) return;
    try_send(s, c);
    if (c->dead) return;
    if (c->draining && c->head == NULL && c->out.len == 0) {
        conn_close(s, c, NULL);
        return;
    }
    conn_update_events(s, c);
}
