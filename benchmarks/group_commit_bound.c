/*
 * The disk's own bound for durable transaction cycles: what an ideal group commit with no
 * server, no RPC and no Python reaches on this disk.
 *
 * CLIENTS threads each run cycles of three steps, as a transaction cycle is three durable
 * calls (start, can-commit, commit); a step appends a 100-byte record to one file and waits
 * until a sync covers it. SYNCERS threads take everything written and not yet claimed,
 * fdatasync it, and release it in write order (a later sync never releases an earlier
 * batch). With DELAY_US > 0 a syncer that finds something to sync first waits up to that
 * long for one edit per client (the commit delay of txn serve, without its cost). Half a
 * second of warm-up, then SECONDS measured.
 *
 * Usage: group_commit_bound CLIENTS SECONDS FILE [SYNCERS [DELAY_US]]
 * Prints one JSON line: cycles_per_second, syncs_per_second, edits_per_sync.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t written_cv = PTHREAD_COND_INITIALIZER;
static pthread_cond_t synced_cv = PTHREAD_COND_INITIALIZER;
static long written, claimed, synced, syncs, cycles; /* under mu, except cycles (atomic) */
static int fd;
static volatile int stop;
static int clients;
static long delay_ns;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void *syncer(void *unused) {
    (void)unused;
    pthread_mutex_lock(&mu);
    while (!stop) {
        while (written == claimed && !stop) pthread_cond_wait(&written_cv, &mu);
        if (delay_ns > 0) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += delay_ns;
            until.tv_sec += until.tv_nsec / 1000000000L;
            until.tv_nsec %= 1000000000L;
            while (written - claimed < clients && !stop)
                if (pthread_cond_timedwait(&written_cv, &mu, &until) != 0) break;
        }
        long from = claimed, to = written;
        claimed = to;
        pthread_mutex_unlock(&mu);
        if (fdatasync(fd) != 0) { perror("fdatasync"); exit(1); }
        pthread_mutex_lock(&mu);
        while (synced < from && !stop) pthread_cond_wait(&synced_cv, &mu);
        if (to > synced) synced = to;
        syncs++;
        pthread_cond_broadcast(&synced_cv);
    }
    pthread_mutex_unlock(&mu);
    return NULL;
}

static void *client(void *unused) {
    (void)unused;
    char record[100];
    memset(record, 'x', sizeof record);
    while (!stop) {
        for (int step = 0; step < 3; step++) {
            pthread_mutex_lock(&mu);
            if (write(fd, record, sizeof record) != (ssize_t)sizeof record) { perror("write"); exit(1); }
            long mine = ++written;
            pthread_cond_broadcast(&written_cv);
            while (synced < mine && !stop) pthread_cond_wait(&synced_cv, &mu);
            pthread_mutex_unlock(&mu);
        }
        __sync_fetch_and_add(&cycles, 1);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: %s CLIENTS SECONDS FILE [SYNCERS [DELAY_US]]\n", argv[0]); return 2; }
    clients = atoi(argv[1]);
    int syncers = argc > 4 ? atoi(argv[4]) : 1;
    delay_ns = argc > 5 ? atol(argv[5]) * 1000 : 0;
    double seconds = atof(argv[2]);
    if (clients < 1 || clients > 1024 || syncers < 1 || syncers > 64) { fprintf(stderr, "bad counts\n"); return 2; }
    fd = open(argv[3], O_WRONLY | O_CREAT | O_APPEND | O_TRUNC, 0644);
    if (fd < 0) { perror("open"); return 1; }
    pthread_t threads[1024 + 64];
    for (int i = 0; i < syncers; i++) pthread_create(&threads[i], NULL, syncer, NULL);
    for (int i = 0; i < clients; i++) pthread_create(&threads[syncers + i], NULL, client, NULL);
    usleep(500000);
    pthread_mutex_lock(&mu);
    long c0 = __sync_fetch_and_add(&cycles, 0), s0 = syncs;
    pthread_mutex_unlock(&mu);
    double t0 = now();
    usleep((useconds_t)(seconds * 1e6));
    pthread_mutex_lock(&mu);
    long c1 = __sync_fetch_and_add(&cycles, 0), s1 = syncs;
    stop = 1;
    pthread_cond_broadcast(&synced_cv);
    pthread_cond_broadcast(&written_cv);
    pthread_mutex_unlock(&mu);
    double elapsed = now() - t0;
    for (int i = 0; i < syncers + clients; i++) pthread_join(threads[i], NULL);
    close(fd);
    unlink(argv[3]);
    printf("{\"cycles_per_second\": %.1f, \"syncs_per_second\": %.1f, \"edits_per_sync\": %.2f}\n",
           (c1 - c0) / elapsed, (s1 - s0) / elapsed, s1 > s0 ? 3.0 * (c1 - c0) / (s1 - s0) : 0.0);
    return 0;
}
