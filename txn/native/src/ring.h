/* Sends to many sockets in one system call (io_uring, through its raw system calls), for
 * the send thread's batches (sender.c): a round's 16 replies cost one kernel entry instead
 * of 16. Where io_uring is missing or forbidden (an old kernel, a seccomp filter,
 * kernel.io_uring_disabled) ring_open fails and the caller sends one by one.
 *
 * A Ring belongs to one thread. */
#ifndef TXN_NATIVE_RING_H
#define TXN_NATIVE_RING_H

#include <stddef.h>

#define RING_ENTRIES 64

typedef struct Ring {
    int fd; /* -1: no ring */
    unsigned *sq_tail, *sq_mask, *sq_array, *cq_head, *cq_tail, *cq_mask;
    void *sqes, *cqes;
    void *sq_map, *cq_map;
    size_t sq_size, cq_size, sqes_size;
} Ring;

/* 0 with a ring, or -1 (errno set) with r->fd = -1. */
int ring_open(Ring *r);
void ring_close(Ring *r);

/* One non-blocking send (MSG_NOSIGNAL | MSG_DONTWAIT) of lens[i] bytes from bufs[i] to
 * fds[i] for each i < n (n <= RING_ENTRIES), all submitted at once; results[i] is the bytes
 * sent or -errno, as send() would give. Returns 0 once every send has completed, or -1 if
 * the ring failed before taking them (none was sent; the ring is closed). */
int ring_send_all(Ring *r, const int *fds, void *const *bufs, const size_t *lens, int n,
                  int *results);

#endif
