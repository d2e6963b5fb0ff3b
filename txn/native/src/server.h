/* The native Thrift server (server.c, conn.c): framed transport on one epoll loop, the hot
 * calls in C (hot.c), everything else through a Python dispatcher, replies released in
 * request order once the log says they are durable; the loop leads the log's group
 * commit itself (docs/txn.md, "The native engine").
 *
 * Threads: the loop runs in the thread that calls serve() and holds the GIL except while
 * it waits (epoll) or does I/O; stop() and complete() may be called from any thread and
 * talk to it through a queue and an eventfd.
 */
#ifndef TXN_NATIVE_SERVER_H
#define TXN_NATIVE_SERVER_H

#include "hot.h"
#include "lock.h"
#include "log.h"
#include "machine.h"

typedef struct Reply {
    struct Reply *next;
    int64_t ticket;  /* the log ticket that must be durable first */
    uint64_t slot;   /* completion id of a deferred reply, else 0 */
    int ready;       /* data is computed (a deferred reply is not, until complete()) */
    int close_after; /* a deferred call whose answer is "close the connection" */
    Buf data;
} Reply;

typedef struct Conn {
    struct Conn *prev, *next;   /* every connection */
    struct Conn *wnext;         /* connections with parked replies */
    struct Conn *aprev, *anext; /* commit delay: answered recently, oldest first */
    int waiting, answered;      /* list memberships */
    double answered_at;
    int fd;
    uint64_t id;
    Buf in; /* received bytes not yet taken as frames */
    Reply *head, *tail;
    Buf out; /* replies being sent (the socket was full) */
    size_t out_sent;
    uint32_t events;  /* epoll registration */
    int blocked;      /* an offloaded call runs: later frames wait for it */
    uint64_t blocked_slot;
    int draining;     /* the server is stopping: no more reading */
    int dead;
    /* the send thread (sender.c): queued = out waits to be handed to it this round; tx = it
     * owns out, out_sent and the descriptor's sending until the loop collects the batch */
    int queued, tx, tx_err;
    struct Conn *snext;
    ClientCache client;
    /* resource limits (txn/rpc/limits.py) */
    int64_t reserved;    /* frame-budget bytes held for the unfinished (or offloaded) frame */
    int budget_wait;     /* queued for the frame budget */
    int64_t budget_need;
    struct Conn *bnext;  /* the budget's queue */
    double partial_since; /* when the unfinished frame began (or was granted), or 0 */
    double last_rx;
} Conn;

/* A closed connection's offloaded call still holds its frame's budget until it ends. */
typedef struct Held {
    struct Held *next;
    uint64_t slot;
    int64_t bytes;
} Held;

typedef struct Completion {
    struct Completion *next;
    uint64_t conn_id, slot;
    int64_t ticket;
    PyObject *data; /* bytes, or None: close the connection */
} Completion;

typedef struct {
    PyObject_HEAD
    int epfd, listen_fd, wake_fd, timer_fd;
    Machine *machine;
    Log *log;
    StateLock *lock;    /* the manager's state lock, taken in C by the hot path */
    PyObject *clock;    /* a callable giving now in epoch milliseconds, or NULL: the wall clock */
    int run_state;      /* the manager's, mirrored by set_state(): 0 running, 1 not running,
                           2 failed; read and written with the GIL held */
    PyObject *dispatch; /* the generic path (txn/native/server.py) */
    PyObject *on_close; /* a callable taking the reason a connection was closed */
    HotConfig cfg;
    uint32_t max_frame_bytes, offload_frame_bytes;
    double commit_delay_s;
    int64_t budget_capacity, budget_used;
    Conn *budget_head, *budget_tail;
    Held *held;
    double frame_timeout_s, idle_timeout_s, next_sweep;
    Conn *conns;
    Conn *graveyard; /* closed, freed by the loop when nothing refers to them */
    uint64_t next_id;
    int nconns;
    Conn *waiting;
    Conn *answered_head, *answered_tail;
    double batch_since; /* commit delay: when the batch's first look was, or 0 */
    int timer_armed;
    pthread_mutex_t qmu; /* guards everything below */
    Completion *completions;
    double age_by; /* tests: make every recorded answer this much older */
    int stop_requested;
    double drain_timeout_s;
    int serving, initialized;
    int use_sender; /* config send_thread: hand large rounds of replies to the send thread */
    Buf scratch;
    int64_t stat_native, stat_generic;
    /* flush rounds of the loop's group commit (server.c, round_*): a round runs from the end
     * of one flush to the end of the next; its time is split into syncing (the flush),
     * handing out the replies it released (until no batch is being sent when the loop
     * looks) and gathering the next calls (until the next flush begins) */
    int64_t stat_rounds;
    double stat_round_sync, stat_round_fanout, stat_round_gather;
    double round_flushed, round_fanned; /* this round's flush end, replies handed out; or 0 */
    /* the send thread (sender.c) */
    int sender_started, sent_fd;
    pthread_t sender_thread;
    pthread_mutex_t smu; /* guards job* (but `job`'s members), want_done, sender_quit */
    pthread_cond_t scv;
    Conn *pending;      /* the loop's: queued this round */
    Conn *job;          /* handed to the thread (job_busy), then done until collected */
    Conn *job_claim;    /* the batch's first connection nobody took yet */
    int job_left;       /* connections of the batch not sent yet */
    int job_busy, job_done, job_unfinished, want_done, sender_quit;
    int tx_attention;   /* the loop's: a connection in the batch needs it back soon */
    int64_t stat_batches, stat_batched, stat_unfinished; /* unfinished: guarded by smu */
} Server;

extern PyTypeObject ServerType;

/* conn.c */
Conn *conn_new(Server *s, int fd);
void conn_close(Server *s, Conn *c, const char *reason);
/* Read what arrived and run every whole frame (unless blocked). */
void conn_readable(Server *s, Conn *c);
/* Send what is computed and durable at the head of the queue. */
void conn_send(Server *s, Conn *c, int64_t synced);
void conn_writable(Server *s, Conn *c);
void conn_set_events(Server *s, Conn *c, uint32_t events);
Reply *conn_push_reply(Conn *c, int64_t ticket, const Buf *data);
/* Take the frames that waited for a finished offloaded call. */
void conn_unblock(Server *s, Conn *c);
/* A reason to pause reading went away: read again if none is left. */
void conn_resumed(Server *s, Conn *c);

/* limits.c */
/* Reserve `size` bytes of the frame budget for c's unfinished frame now (1), or queue it
 * (0: reading pauses until a release grants it). Nobody jumps the queue. */
int budget_reserve(Server *s, Conn *c, int64_t size);
/* Give c's reservation back (its frame is done, or it closed) and grant waiters. */
void budget_give_back(Server *s, Conn *c);
void budget_release(Server *s, int64_t size);
void budget_forget(Server *s, Conn *c);
/* Close connections past their frame or idle timeout; the seconds to the next sweep. */
void limits_sweep(Server *s, double now);
double limits_period(const Server *s); /* 0: no timeouts */
int conn_paused_by_server(const Conn *c);

/* sender.c: replies of many connections sent by a second thread while the loop reads */
int sender_start(Server *s);
void sender_queue(Server *s, Conn *c);
/* End of each loop round: collect a finished batch, hand over (or send) what was queued. */
void sender_step(Server *s);
/* Collect a finished batch; whether one is still being sent. */
int sender_collect(Server *s);
/* Whether a batch is being sent (nothing else). */
int sender_busy(Server *s);
/* Whether a batch is being sent; if so, the loop is told when it ends. */
int sender_sending(Server *s);
/* Wait for the thread's batch, collect it and end the thread. */
void sender_stop(Server *s);
/* Whether the batch has connections nobody took yet; the loop sends one of them. */
int sender_claimable(Server *s);
void sender_steal(Server *s);
int conn_sending_out(const Conn *c); /* replies left in out for the loop to send */
void conn_sent(Server *s, Conn *c, int64_t synced);

/* server.c */
void server_park(Server *s, Conn *c);
void server_answered(Server *s, Conn *c, int answered);
double monotonic_now(void);

#endif
