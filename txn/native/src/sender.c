/* The send thread: when a sync releases the replies of many connections at once, a second
 * thread sends them while the loop goes back to reading. Each loopback `send` runs the
 * receiver's TCP input and wakes the client in the sender's context (~15-20 µs here), so a
 * round of 16 replies kept the loop from the next calls for a few hundred µs; now the loop
 * reads and runs the calls of the clients answered first while the rest are being sent
 * (docs/txn.md, "The native engine"; docs/benchmarks.md).
 *
 * Hand-over: in a round the loop queues the connections whose replies went into `out`
 * (conn_send -> sender_queue); at the round's end (sender_step) it hands them over as one
 * batch when there are at least SENDER_MIN_CONNS and no batch is out, else sends them
 * itself. Both threads take the batch's connections one at a time (claim, under smu): the
 * thread from the start, the loop whenever it finds nothing to read (a zero-timeout
 * epoll_wait), so a thread that does not get a CPU soon (a busy machine) costs no more than
 * the loop sending everything itself. While a connection is in a batch (`tx`) its `out`,
 * `out_sent` and the sending side of its descriptor belong to whoever took it: the loop
 * still reads it and runs its calls, but parks their replies, does not close the
 * descriptor (conn_close leaves that to the collection) and does not free it (bury). Sends
 * do not block; what a full socket leaves, or an error, the loop takes up when it collects
 * the batch (EPOLLOUT, or closing). When the thread sends the batch's last connection it
 * writes `sent_fd` only if the loop asked (want_done: a connection of the batch has replies
 * due or was closed), or a send did not finish.
 *
 * Replies stay in request order per connection: a connection is in at most one batch, and
 * nothing is added to its `out` while it is.
 */
#include "server.h"

#include <errno.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

/* Fewer connections than this in a round are sent by the loop: a hand-over costs a thread
 * wake-up, which one or two sends do not repay. */
#define SENDER_MIN_CONNS 4

extern char SERVER_SENT_TAG;

static void send_out(Conn *c) {
    while (c->out_sent < c->out.len) {
        ssize_t n = send(c->fd, c->out.data + c->out_sent, c->out.len - c->out_sent,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) c->tx_err = errno;
            return;
        }
        c->out_sent += (size_t)n;
    }
}

/* Take the batch's next connection to send (either thread; under smu), or NULL. */
static Conn *claim(Server *s) {
    Conn *c = s->job_claim;
    if (c != NULL) s->job_claim = c->snext;
    return c;
}

/* c of the batch is sent (under smu). The last one ends the batch; when the thread ends
 * it, the loop is told if it asked or has a send to finish. */
static void sent_one(Server *s, Conn *c, int by_loop) {
    int unfinished = c->tx_err != 0 || c->out_sent < c->out.len;
    s->stat_unfinished += unfinished;
    s->job_unfinished |= unfinished;
    if (--s->job_left > 0) return;
    s->job_busy = 0;
    s->job_done = 1;
    if (!by_loop && (s->job_unfinished || s->want_done || s->sender_quit)) {
        uint64_t one = 1;
        ssize_t ignored = write(s->sent_fd, &one, sizeof one);
        (void)ignored;
    }
    s->want_done = 0;
    pthread_cond_broadcast(&s->scv); /* sender_stop may wait for the batch */
}

static void *sender_main(void *arg) {
    Server *s = arg;
    pthread_mutex_lock(&s->smu);
    for (;;) {
        while (s->job_claim == NULL && !s->sender_quit) pthread_cond_wait(&s->scv, &s->smu);
        Conn *c = claim(s);
        if (c == NULL) break; /* quit, with nothing left to take */
        pthread_mutex_unlock(&s->smu);
        send_out(c);
        pthread_mutex_lock(&s->smu);
        sent_one(s, c, 0);
    }
    pthread_mutex_unlock(&s->smu);
    return NULL;
}

int sender_claimable(Server *s) {
    if (!s->sender_started) return 0;
    pthread_mutex_lock(&s->smu);
    int any = s->job_claim != NULL;
    pthread_mutex_unlock(&s->smu);
    return any;
}

void sender_steal(Server *s) {
    pthread_mutex_lock(&s->smu);
    Conn *c = claim(s);
    pthread_mutex_unlock(&s->smu);
    if (c == NULL) return;
    send_out(c);
    pthread_mutex_lock(&s->smu);
    sent_one(s, c, 1);
    pthread_mutex_unlock(&s->smu);
}

int sender_start(Server *s) {
    s->job = s->job_claim = s->pending = NULL;
    s->job_busy = s->job_done = s->want_done = s->sender_quit = s->tx_attention = 0;
    s->job_left = s->job_unfinished = 0;
    if (pthread_create(&s->sender_thread, NULL, sender_main, s) != 0) return -1;
    s->sender_started = 1;
    return 0;
}

void sender_queue(Server *s, Conn *c) {
    if (c->queued) return;
    c->queued = 1;
    c->snext = s->pending;
    s->pending = c;
}

int conn_sending_out(const Conn *c) {
    return !c->queued && !c->tx && c->out.len > c->out_sent;
}

/* The loop sends the round's queue itself. */
static void send_pending(Server *s) {
    int64_t synced = log_synced(s->log);
    while (s->pending != NULL) { /* conn_sent may queue what became due meanwhile */
        Conn *list = s->pending;
        s->pending = NULL;
        while (list != NULL) {
            Conn *c = list;
            list = c->snext;
            c->queued = 0;
            if (!c->dead) conn_sent(s, c, synced);
        }
    }
}

/* A batch the thread finished: descriptors of connections closed meanwhile are closed now;
 * errors close; what is left unsent goes on from the loop. */
static void collect(Server *s, Conn *job) {
    int64_t synced = log_synced(s->log);
    s->tx_attention = 0;
    while (job != NULL) {
        Conn *c = job;
        job = c->snext;
        c->tx = 0;
        if (c->dead) {
            close(c->fd);
            c->fd = -1;
            buf_free(&c->out);
            c->out_sent = 0;
        } else if (c->tx_err != 0) {
            c->tx_err = 0;
            conn_close(s, c, NULL);
        } else {
            /* the commit delay counts a reply from when it went out, not when it was queued */
            if (c->answered) server_answered(s, c, 1);
            conn_sent(s, c, synced);
        }
    }
}

int sender_collect(Server *s) {
    if (!s->sender_started) return 0;
    pthread_mutex_lock(&s->smu);
    int busy = s->job_busy;
    Conn *done = NULL;
    if (!busy && s->job_done) {
        done = s->job;
        s->job = NULL;
        s->job_done = 0;
    }
    if (busy && s->tx_attention) s->want_done = 1;
    pthread_mutex_unlock(&s->smu);
    if (done != NULL) collect(s, done);
    return busy;
}

int sender_busy(Server *s) {
    if (!s->sender_started) return 0;
    pthread_mutex_lock(&s->smu);
    int busy = s->job_busy;
    pthread_mutex_unlock(&s->smu);
    return busy;
}

int sender_sending(Server *s) {
    if (!s->sender_started) return 0;
    pthread_mutex_lock(&s->smu);
    int busy = s->job_busy;
    if (busy) s->want_done = 1;
    pthread_mutex_unlock(&s->smu);
    return busy;
}

void sender_step(Server *s) {
    if (!s->sender_started) {
        send_pending(s);
        return;
    }
    int busy = sender_collect(s);
    int n = 0;
    for (Conn *c = s->pending; c != NULL && n < SENDER_MIN_CONNS; c = c->snext) n += !c->dead;
    if (busy || n < SENDER_MIN_CONNS) {
        send_pending(s);
        return;
    }
    Conn *job = NULL;
    while (s->pending != NULL) {
        Conn *c = s->pending;
        s->pending = c->snext;
        c->queued = 0;
        if (c->dead) continue;
        c->tx = 1;
        c->snext = job;
        job = c;
    }
    pthread_mutex_lock(&s->smu);
    s->job = s->job_claim = job;
    s->job_busy = 1;
    s->job_left = s->job_unfinished = 0;
    for (Conn *c = job; c != NULL; c = c->snext) s->job_left++;
    s->stat_batches++;
    s->stat_batched += s->job_left;
    pthread_cond_signal(&s->scv);
    pthread_mutex_unlock(&s->smu);
}

void sender_stop(Server *s) {
    if (!s->sender_started) {
        send_pending(s);
        return;
    }
    while (sender_claimable(s)) sender_steal(s);
    pthread_mutex_lock(&s->smu);
    s->sender_quit = 1;
    pthread_cond_broadcast(&s->scv);
    while (s->job_busy) pthread_cond_wait(&s->scv, &s->smu);
    Conn *done = s->job_done ? s->job : NULL;
    s->job = NULL;
    s->job_done = 0;
    pthread_mutex_unlock(&s->smu);
    pthread_join(s->sender_thread, NULL);
    s->sender_started = 0;
    if (done != NULL) collect(s, done);
    send_pending(s);
}
