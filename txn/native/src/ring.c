/* See ring.h. The ring is used synchronously: submit a batch, wait for all of it, so no
 * buffer or descriptor is in the kernel's hands once ring_send_all returns. */
#include "ring.h"

#include <errno.h>
#include <sched.h>
#include <linux/io_uring.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__NR_io_uring_setup) && defined(__NR_io_uring_enter)

static int enter(int fd, unsigned submit, unsigned wait) {
    return (int)syscall(__NR_io_uring_enter, fd, submit, wait, IORING_ENTER_GETEVENTS, NULL, 0);
}

int ring_open(Ring *r) {
    memset(r, 0, sizeof *r);
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    r->fd = (int)syscall(__NR_io_uring_setup, RING_ENTRIES, &p);
    if (r->fd < 0) {
        r->fd = -1;
        return -1;
    }
    r->sq_size = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    r->cq_size = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    r->sqes_size = p.sq_entries * sizeof(struct io_uring_sqe);
    int prot = PROT_READ | PROT_WRITE, flags = MAP_SHARED | MAP_POPULATE;
    r->sq_map = mmap(NULL, r->sq_size, prot, flags, r->fd, IORING_OFF_SQ_RING);
    r->cq_map = mmap(NULL, r->cq_size, prot, flags, r->fd, IORING_OFF_CQ_RING);
    r->sqes = mmap(NULL, r->sqes_size, prot, flags, r->fd, IORING_OFF_SQES);
    if (r->sq_map == MAP_FAILED || r->cq_map == MAP_FAILED || r->sqes == MAP_FAILED) {
        int err = errno;
        ring_close(r);
        errno = err;
        return -1;
    }
    char *sq = r->sq_map, *cq = r->cq_map;
    r->sq_tail = (unsigned *)(void *)(sq + p.sq_off.tail);
    r->sq_mask = (unsigned *)(void *)(sq + p.sq_off.ring_mask);
    r->sq_array = (unsigned *)(void *)(sq + p.sq_off.array);
    r->cq_head = (unsigned *)(void *)(cq + p.cq_off.head);
    r->cq_tail = (unsigned *)(void *)(cq + p.cq_off.tail);
    r->cq_mask = (unsigned *)(void *)(cq + p.cq_off.ring_mask);
    r->cqes = cq + p.cq_off.cqes;
    return 0;
}

void ring_close(Ring *r) {
    if (r->sqes != NULL && r->sqes != MAP_FAILED) munmap(r->sqes, r->sqes_size);
    if (r->cq_map != NULL && r->cq_map != MAP_FAILED) munmap(r->cq_map, r->cq_size);
    if (r->sq_map != NULL && r->sq_map != MAP_FAILED) munmap(r->sq_map, r->sq_size);
    if (r->fd >= 0) close(r->fd);
    memset(r, 0, sizeof *r);
    r->fd = -1;
}

int ring_send_all(Ring *r, const int *fds, void *const *bufs, const size_t *lens, int n,
                  int *results) {
    if (r->fd < 0 || n < 0 || n > RING_ENTRIES) {
        errno = EINVAL;
        return -1;
    }
    for (int i = 0; i < n; i++) results[i] = -EAGAIN; /* a send never taken was not sent */
    struct io_uring_sqe *sqes = r->sqes;
    unsigned tail = *r->sq_tail, mask = *r->sq_mask;
    for (int i = 0; i < n; i++) {
        unsigned at = (tail + (unsigned)i) & mask;
        struct io_uring_sqe *e = &sqes[at];
        memset(e, 0, sizeof *e);
        e->opcode = IORING_OP_SEND;
        e->fd = fds[i];
        e->addr = (unsigned long)bufs[i];
        e->len = (unsigned)lens[i];
        e->msg_flags = MSG_NOSIGNAL | MSG_DONTWAIT;
        e->user_data = (unsigned long)i;
        r->sq_array[at] = at;
    }
    __atomic_store_n(r->sq_tail, tail + (unsigned)n, __ATOMIC_RELEASE);
    int submitted = 0;
    while (submitted < n) {
        int k = enter(r->fd, (unsigned)(n - submitted), (unsigned)(n - submitted));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            if (submitted == 0) { /* nothing taken: sends go one by one from now on */
                int err = errno;
                ring_close(r);
                errno = err;
                return -1;
            }
            break; /* the rest cannot be taken back: wait for what was taken, then close */
        }
        submitted += k;
    }
    struct io_uring_cqe *cqes = r->cqes;
    unsigned head = *r->cq_head, cmask = *r->cq_mask;
    for (int done = 0; done < submitted;) {
        unsigned ready = __atomic_load_n(r->cq_tail, __ATOMIC_ACQUIRE);
        for (; head != ready && done < submitted; head++, done++) {
            struct io_uring_cqe *c = &cqes[head & cmask];
            if (c->user_data < (unsigned long)n) results[c->user_data] = c->res;
        }
        __atomic_store_n(r->cq_head, head, __ATOMIC_RELEASE);
        /* the buffers are the kernel's until their sends complete, and a non-blocking send
         * completes at once: if waiting fails, poll the queue */
        if (done < submitted && enter(r->fd, 0, (unsigned)(submitted - done)) < 0 && errno != EINTR)
            sched_yield();
    }
    if (submitted < n) ring_close(r); /* entries it did not take stay queued: no more ring */
    return 0;
}

#else /* no io_uring in these headers */

int ring_open(Ring *r) {
    memset(r, 0, sizeof *r);
    r->fd = -1;
    errno = ENOSYS;
    return -1;
}

void ring_close(Ring *r) { r->fd = -1; }

int ring_send_all(Ring *r, const int *fds, void *const *bufs, const size_t *lens, int n,
                  int *results) {
    errno = ENOSYS;
    return -1;
}

#endif
