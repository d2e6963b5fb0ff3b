/* See server.h: the loop, group commit with the commit delay, releasing replies, and the
 * server's Python type. */
#include "server.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>


/* epoll data of the server's own descriptors (connections carry their Conn *) */
char SERVER_LISTEN_TAG, SERVER_WAKE_TAG, SERVER_TIMER_TAG, SERVER_LOG_TAG, SERVER_SENT_TAG;

double monotonic_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* -- lists --------------------------------------------------------------------------------- */

void server_park(Server *s, Conn *c) {
    if (c->waiting) return;
    c->waiting = 1;
    c->wnext = s->waiting;
    s->waiting = c;
}

/* The commit delay's list: connections fully answered recently, oldest first. */
void server_answered(Server *s, Conn *c, int answered) {
    if (c->answered) {
        if (c->aprev != NULL) c->aprev->anext = c->anext;
        else s->answered_head = c->anext;
        if (c->anext != NULL) c->anext->aprev = c->aprev;
        else s->answered_tail = c->aprev;
        c->aprev = c->anext = NULL;
        c->answered = 0;
    }
    if (!answered || s->commit_delay_s <= 0 || c->dead) return;
    c->answered = 1;
    c->answered_at = monotonic_now();
    c->aprev = s->answered_tail;
    if (s->answered_tail != NULL) s->answered_tail->anext = c;
    else s->answered_head = c;
    s->answered_tail = c;
}

/* -- group commit ------------------------------------------------------------------------- */

static void arm_timer(Server *s, double deadline) {
    struct itimerspec spec = {{0, 0}, {(time_t)deadline, (long)((deadline - (double)(time_t)deadline) * 1e9)}};
    if (spec.it_value.tv_sec == 0 && spec.it_value.tv_nsec == 0) spec.it_value.tv_nsec = 1;
    timerfd_settime(s->timer_fd, TFD_TIMER_ABSTIME, &spec, NULL);
    s->timer_armed = 1;
}

static void disarm_timer(Server *s) {
    if (!s->timer_armed) return;
    struct itimerspec spec = {{0, 0}, {0, 0}};
    timerfd_settime(s->timer_fd, 0, &spec, NULL);
    s->timer_armed = 0;
}

/* Whether to hold the next flush back (as txn/rpc/server.py's _delaying): while a
 * connection answered less than the delay ago has not called again, and the batch's first
 * look was less than the delay ago; and while a batch of replies is being sent. */
static int delaying(Server *s) {
    if (sender_sending(s)) { /* replies are still going out: the delay starts after them */
        s->batch_since = 0;
        disarm_timer(s);
        return 1;
    }
    double now = monotonic_now(), delay = s->commit_delay_s;
    while (s->answered_head != NULL && now - s->answered_head->answered_at >= delay)
        server_answered(s, s->answered_head, 0); /* quiet for a whole delay */
    if (s->answered_head != NULL) {
        if (s->batch_since == 0) s->batch_since = now;
        double deadline = s->batch_since + delay;
        if (now < deadline) {
            if (!s->timer_armed) arm_timer(s, deadline);
            return 1;
        }
    }
    s->batch_since = 0;
    disarm_timer(s); /* the batch goes now: no wake-up at its old deadline */
    return 0;
}

static void abort_all(Server *s, const char *reason) {
    while (s->conns != NULL) conn_close(s, s->conns, reason);
}

/* -- round statistics (Server.rounds; docs/txn.md, "The native engine") ------------------ */

/* The replies of the round's flush are all out once no batch is being sent when the loop
 * looks (after the batch was handed over, so at a later turn of the loop). */
static void round_fanned_out(Server *s, int sending) {
    if (s->round_flushed > 0 && s->round_fanned == 0 && !sending)
        s->round_fanned = monotonic_now();
}

/* A flush from `began` to `ended` closes the round the previous flush opened. */
static void round_closed(Server *s, double began, double ended) {
    if (s->round_flushed > 0) { /* not the first flush */
        s->stat_round_sync += ended - began;
        double fanned = s->round_fanned > 0 && s->round_fanned < began ? s->round_fanned : began;
        s->stat_round_fanout += fanned - s->round_flushed;
        s->stat_round_gather += began - fanned;
        s->stat_rounds++;
    }
    s->round_flushed = ended;
    s->round_fanned = 0;
}

/* Flush the log when there is something to flush and the commit delay allows it. */
static void sync_step(Server *s) {
    if (!log_has_pending(s->log)) return;
    if (s->commit_delay_s > 0 && delaying(s)) return;
    double began = monotonic_now();
    /* -2: another thread is flushing (and will wake the loop). The loop's own flush does
     * not write the log's eventfd: release() below looks at its outcome in this turn, and
     * the write, the wake of the next epoll_wait and the read are a round's waste. */
    int64_t flushed = log_flush(s->log, 0);
    if (flushed == -1) PyErr_Clear(); /* the failure shows in release() */
    if (flushed >= 0) round_closed(s, began, monotonic_now());
}

/* Send every reply that is durable now; abort everything if the log or manager failed. */
static void release(Server *s) {
    if (s->run_state == 2 || log_failed(s->log)) {
        /* what is parked will never be durable: never answer OK for it */
        abort_all(s, "the transaction log failed");
    }
    int64_t synced = log_synced(s->log);
    Conn *list = s->waiting;
    s->waiting = NULL;
    while (list != NULL) {
        Conn *c = list;
        list = c->wnext;
        c->waiting = 0;
        if (!c->dead) conn_send(s, c, synced);
    }
}

/* -- completions from worker threads ------------------------------------------------------ */

static Conn *find_conn(Server *s, uint64_t id) {
    for (Conn *c = s->conns; c != NULL; c = c->next)
        if (c->id == id) return c;
    return NULL;
}

static void take_completions(Server *s) {
    pthread_mutex_lock(&s->qmu);
    Completion *list = s->completions;
    s->completions = NULL;
    pthread_mutex_unlock(&s->qmu);
    int64_t synced = log_synced(s->log);
    while (list != NULL) {
        Completion *done = list;
        list = done->next;
        Conn *c = find_conn(s, done->conn_id);
        Reply *r = c != NULL ? c->head : NULL;
        while (r != NULL && r->slot != done->slot) r = r->next;
        if (r == NULL) { /* the connection closed meanwhile; its frame's budget comes back */
            for (Held **at = &s->held; *at != NULL; at = &(*at)->next) {
                if ((*at)->slot == done->slot) {
                    Held *held = *at;
                    *at = held->next;
                    budget_release(s, held->bytes);
                    free(held);
                    break;
                }
            }
        } else {
            if (PyBytes_Check(done->data) &&
                buf_reserve(&r->data, (size_t)PyBytes_GET_SIZE(done->data)) == 0) {
                put_raw(&r->data, PyBytes_AS_STRING(done->data),
                        (size_t)PyBytes_GET_SIZE(done->data));
                r->ticket = done->ticket;
            } else {
                r->close_after = 1;
            }
            r->ready = 1;
            if (c->blocked) conn_unblock(s, c);
            if (!c->dead) conn_send(s, c, synced);
        }
        Py_DECREF(done->data);
        free(done);
    }
}

/* Tests let time pass for the commit delay by ageing the recorded answers. */
static void age_answers(Server *s) {
    pthread_mutex_lock(&s->qmu);
    double by = s->age_by;
    s->age_by = 0;
    pthread_mutex_unlock(&s->qmu);
    for (Conn *c = s->answered_head; by != 0 && c != NULL; c = c->anext) c->answered_at -= by;
}

/* -- the loop ---------------------------------------------------------------------------- */

static void accept_all(Server *s) {
    for (;;) {
        int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return; /* EAGAIN, or a connection reset before we took it */
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (conn_new(s, fd) == NULL) close(fd);
    }
}

static void drain_fd(int fd) {
    uint64_t value;
    ssize_t ignored = read(fd, &value, sizeof value);
    (void)ignored;
}

static void begin_stop(Server *s) {
    epoll_ctl(s->epfd, EPOLL_CTL_DEL, s->listen_fd, NULL);
    close(s->listen_fd);
    s->listen_fd = -1;
    for (Conn *c = s->conns, *next; c != NULL; c = next) {
        next = c->next;
        c->draining = 1;
        conn_send(s, c, log_synced(s->log)); /* closes it when nothing is left */
    }
}

/* Free the closed connections that no event of this round and no list can name (all of
 * them when the loop ends). */
static void bury(Server *s, int all) {
    Conn **at = &s->graveyard;
    while (*at != NULL) {
        Conn *c = *at;
        /* release() drops it from the waiting list first, sender_step from its lists */
        if ((c->waiting || c->queued || c->tx) && !all) {
            at = &c->next;
            continue;
        }
        *at = c->next;
        free(c);
    }
    if (all) s->waiting = NULL;
}

PyObject *server_serve(Server *s, PyObject *unused) {
    if (s->serving || s->listen_fd < 0) {
        PyErr_SetString(PyExc_RuntimeError, "the server is serving, or has stopped");
        return NULL;
    }
    if (s->use_sender && sender_start(s) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return NULL;
    }
    s->serving = 1;
    struct epoll_event events[256];
    double drain_deadline = 0;
    double period = limits_period(s);
    s->next_sweep = period > 0 ? monotonic_now() + period : 0;
    for (;;) {
        /* a batch nobody took all of: the loop reads what is there, else sends one */
        int steal = sender_claimable(s);
        int timeout_ms = steal ? 0 : drain_deadline > 0 ? 10 : -1;
        if (s->next_sweep > 0) {
            int until = (int)((s->next_sweep - monotonic_now()) * 1000) + 1;
            if (until < 0) until = 0;
            if (timeout_ms < 0 || until < timeout_ms) timeout_ms = until;
        }
        int n;
        Py_BEGIN_ALLOW_THREADS n = epoll_wait(s->epfd, events, 256, timeout_ms);
        Py_END_ALLOW_THREADS if (n < 0 && errno != EINTR) {
            PyErr_SetFromErrno(PyExc_OSError);
            break;
        }
        if (n == 0 && steal) sender_steal(s);
        for (int i = 0; i < n; i++) {
            void *tag = events[i].data.ptr;
            if (tag == &SERVER_LISTEN_TAG) {
                if (s->listen_fd >= 0) accept_all(s);
            } else if (tag == &SERVER_WAKE_TAG) {
                drain_fd(s->wake_fd);
                take_completions(s);
                age_answers(s);
            } else if (tag == &SERVER_TIMER_TAG) {
                drain_fd(s->timer_fd);
                s->timer_armed = 0;
            } else if (tag == &SERVER_SENT_TAG) {
                drain_fd(s->sent_fd); /* sender_step below collects the batch */
            } else if (tag == &SERVER_LOG_TAG) {
                drain_fd(s->log->notify_fd); /* another thread flushed */
            } else {
                Conn *c = tag;
                if (c->dead) continue;
                if (events[i].events & EPOLLOUT) conn_writable(s, c);
                if (!c->dead && events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                    conn_readable(s, c);
            }
        }
        /* before the commit delay looks at who was answered when */
        round_fanned_out(s, sender_collect(s));
        sync_step(s);
        release(s);
        if (s->next_sweep > 0 && monotonic_now() >= s->next_sweep) {
            limits_sweep(s, monotonic_now());
            s->next_sweep = monotonic_now() + period;
        }
        pthread_mutex_lock(&s->qmu);
        int stop = s->stop_requested;
        pthread_mutex_unlock(&s->qmu);
        if (stop && drain_deadline == 0) {
            drain_deadline = monotonic_now() + s->drain_timeout_s;
            begin_stop(s);
        }
        sender_step(s); /* after everything that may queue replies or close connections */
        round_fanned_out(s, sender_busy(s));
        if (drain_deadline > 0 && (s->nconns == 0 || monotonic_now() >= drain_deadline)) {
            abort_all(s, s->nconns ? "server stopping" : NULL);
            break;
        }
        bury(s, 0);
    }
    sender_stop(s);
    bury(s, 1);
    s->serving = 0;
    return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
}
