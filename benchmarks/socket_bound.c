/*
 * The bound for durable transaction cycles over sockets: what the least a transaction server
 * must do per cycle reaches on this machine, with no Thrift, no state and no Python.
 *
 * CLIENTS threads in a child process (as a client program is a process of its own) each run
 * cycles of three blocking request/reply round trips over loopback TCP (start, can-commit,
 * commit): send a 64-byte request, wait for the 32-byte reply. One server thread in this
 * process gathers requests with epoll, appends a 100-byte record per request with one
 * `write` and one `fdatasync` per round, then sends each request's reply. With DELAY_US > 0
 * a round that has a request waits up to that long for one request per client (the commit
 * delay of txn serve, and of group_commit_bound.c); SYNC 0 leaves out the `fdatasync` (the
 * sockets alone). Half a second of warm-up, then SECONDS measured.
 *
 * Usage: socket_bound CLIENTS SECONDS FILE [DELAY_US [SYNC]]
 * Prints one JSON line: cycles_per_second, syncs_per_second, edits_per_sync,
 * server_cpu_us_per_cycle, clients_cpu_us_per_cycle, the measured cycles and rounds (cycles
 * counted as the clients finish them, so a window's edges hold parts of cycles of rounds
 * outside it), and round_us: a round (from the end of
 * one sync to the end of the next) split as txn serve splits its own (docs/txn.md, "The
 * native engine") into syncing (`write` + `fdatasync`), handing out the replies and
 * gathering the next requests.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define REQUEST 64
#define REPLY 32
#define RECORD 100
#define MAX_CLIENTS 1024

static volatile long *cycles; /* shared with the clients' process */
static struct sockaddr_in address;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static double cpu_of(int who) {
    struct rusage u;
    getrusage(who, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

static int exact(int fd, char *buf, size_t n, int sending) {
    for (size_t done = 0; done < n;) {
        ssize_t k = sending ? send(fd, buf + done, n - done, MSG_NOSIGNAL) : recv(fd, buf + done, n - done, 0);
        if (k <= 0) return -1;
        done += (size_t)k;
    }
    return 0;
}

static void *client(void *unused) {
    (void)unused;
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&address, sizeof address) != 0) { perror("connect"); exit(1); }
    char request[REQUEST], reply[REPLY];
    memset(request, 'q', sizeof request);
    for (;;) {
        for (int step = 0; step < 3; step++)
            if (exact(fd, request, sizeof request, 1) || exact(fd, reply, sizeof reply, 0)) exit(0);
        __sync_fetch_and_add(cycles, 1);
    }
    return NULL;
}

static void run_clients(int clients) {
    pthread_t threads[MAX_CLIENTS];
    for (int i = 0; i < clients; i++) pthread_create(&threads[i], NULL, client, NULL);
    for (int i = 0; i < clients; i++) pthread_join(threads[i], NULL);
    exit(0);
}

typedef struct { int fd; size_t have; char buf[REQUEST]; } Conn;

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: %s CLIENTS SECONDS FILE [DELAY_US [SYNC]]\n", argv[0]); return 2; }
    int clients = atoi(argv[1]);
    double seconds = atof(argv[2]), delay = (argc > 4 ? atol(argv[4]) : 0) * 1e-6;
    int sync = argc > 5 ? atoi(argv[5]) : 1;
    if (clients < 1 || clients > MAX_CLIENTS) { fprintf(stderr, "bad counts\n"); return 2; }
    int log = open(argv[3], O_WRONLY | O_CREAT | O_APPEND | O_TRUNC, 0644);
    if (log < 0) { perror("open"); return 1; }
    cycles = mmap(NULL, sizeof *cycles, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (bind(listener, (struct sockaddr *)&address, sizeof address) || listen(listener, MAX_CLIENTS) ||
        getsockname(listener, (struct sockaddr *)&address, &length)) { perror("listen"); return 1; }
    pid_t child = fork();
    if (child == 0) run_clients(clients);
    static Conn conns[MAX_CLIENTS];
    int ep = epoll_create1(0), one = 1;
    for (int i = 0; i < clients; i++) {
        conns[i].fd = accept4(listener, NULL, NULL, SOCK_NONBLOCK);
        if (conns[i].fd < 0) { perror("accept"); return 1; }
        setsockopt(conns[i].fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct epoll_event e = {.events = EPOLLIN, .data.ptr = &conns[i]};
        epoll_ctl(ep, EPOLL_CTL_ADD, conns[i].fd, &e);
    }
    static Conn *pending[MAX_CLIENTS];
    static char records[MAX_CLIENTS * RECORD], reply[REPLY];
    memset(records, 'x', sizeof records);
    memset(reply, 'r', sizeof reply);
    int npending = 0;
    long syncs = 0, s0 = 0, c0 = 0;
    double started = now(), t0 = 0, deadline = 0, cpu0 = 0, synced_at = 0;
    double syncing = 0, replying = 0, gathering = 0; /* over the measured rounds */
    struct epoll_event events[MAX_CLIENTS];
    for (;;) {
        double t = now();
        if (t0 == 0 && t - started >= 0.5) {
            t0 = t, c0 = *cycles, s0 = syncs, cpu0 = cpu_of(RUSAGE_SELF);
        } else if (t0 > 0 && t - t0 >= seconds) {
            break;
        }
        int full = npending >= clients, due = npending > 0 && (delay <= 0 || t >= deadline);
        if (full || due) { /* one round: append, sync, answer everyone in it */
            double began = t;
            if (write(log, records, (size_t)npending * RECORD) != (ssize_t)npending * RECORD) { perror("write"); return 1; }
            if (sync && fdatasync(log) != 0) { perror("fdatasync"); return 1; }
            syncs++;
            double ended = now();
            for (int i = 0; i < npending; i++)
                if (send(pending[i]->fd, reply, sizeof reply, MSG_NOSIGNAL) != (ssize_t)sizeof reply) { perror("send"); return 1; }
            double answered = now();
            if (t0 > 0 && synced_at > 0) {
                syncing += ended - began;
                gathering += began - synced_at;
            }
            if (t0 > 0) replying += answered - ended;
            synced_at = answered;
            npending = 0;
            continue;
        }
        double wait = npending > 0 ? deadline - t : 0.1;
        struct timespec ts = {(time_t)wait, (long)((wait - (time_t)wait) * 1e9)};
        int n = epoll_pwait2(ep, events, MAX_CLIENTS, &ts, NULL);
        for (int i = 0; i < n; i++) {
            Conn *c = events[i].data.ptr;
            ssize_t k = recv(c->fd, c->buf + c->have, REQUEST - c->have, 0);
            if (k <= 0) { fprintf(stderr, "a client went away\n"); return 1; }
            c->have += (size_t)k;
            if (c->have == REQUEST) { /* one request in flight per client */
                c->have = 0;
                if (npending == 0) deadline = now() + delay;
                pending[npending++] = c;
            }
        }
    }
    double elapsed = now() - t0, server_cpu = cpu_of(RUSAGE_SELF) - cpu0;
    long done = *cycles - c0, rounds = syncs - s0;
    kill(child, SIGKILL);
    int status;
    struct rusage child_usage;
    wait4(child, &status, 0, &child_usage);
    double client_cpu = child_usage.ru_utime.tv_sec + child_usage.ru_stime.tv_sec +
                        (child_usage.ru_utime.tv_usec + child_usage.ru_stime.tv_usec) * 1e-6;
    close(log);
    unlink(argv[3]);
    /* the clients' CPU covers their whole life, warm-up included: an upper bound */
    printf("{\"cycles_per_second\": %.1f, \"syncs_per_second\": %.1f, \"edits_per_sync\": %.2f, "
           "\"server_cpu_us_per_cycle\": %.1f, \"clients_cpu_us_per_cycle\": %.1f, "
           "\"cycles\": %ld, \"rounds\": %ld, "
           "\"round_us\": {\"sync\": %.0f, \"replies\": %.0f, \"calls\": %.0f}}\n",
           done / elapsed, rounds / elapsed, rounds > 0 ? 3.0 * done / rounds : 0.0,
           done > 0 ? server_cpu / done * 1e6 : 0.0, done > 0 ? client_cpu / (*cycles) * 1e6 : 0.0, done, rounds,
           rounds > 0 ? syncing / rounds * 1e6 : 0.0, rounds > 0 ? replying / rounds * 1e6 : 0.0,
           rounds > 0 ? gathering / rounds * 1e6 : 0.0);
    return 0;
}
