/* Probe for issue 4's "io_uring" direction: reads a whole file front to back from ONE thread with
 * io_uring, QD reads of BS bytes in flight, into host buffers (no GPU), and prints GB/s.
 * The question: does a queue of reads from one thread beat gdsroute's 16 threads of pread, cold
 * (target 5, against dd iflag=direct) or warm (target 8)? Modes:
 *   buffered  through the page cache, as gdsroute's POSIX backend reads (warm data is copied by
 *             the submitting thread itself, inline)
 *   async     the same with IOSQE_ASYNC: every read goes to io_uring's kernel worker threads, so
 *             warm copies run in parallel
 *   direct    O_DIRECT (what dd iflag=direct measures; leaves the page cache cold)
 * Usage: probe-uring FILE QD BS MODE   e.g. probe-uring /var/tmp/f.bin 4 4194304 buffered
 * Raw system calls (no liburing on the GPU machine). Build: cc -O2 -Wall -o probe-uring probe-uring.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static void die(const char *what) {
    fprintf(stderr, "probe-uring: %s: %s\n", what, strerror(errno));
    exit(1);
}

struct ring {
    int fd;
    unsigned *sq_tail, *sq_mask, *sq_array, *cq_head, *cq_tail, *cq_mask;
    struct io_uring_sqe *sqes;
    struct io_uring_cqe *cqes;
};

static void ring_init(struct ring *r, unsigned entries) {
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    r->fd = (int)syscall(__NR_io_uring_setup, entries, &p);
    if (r->fd < 0) die("io_uring_setup");
    if (!(p.features & IORING_FEAT_SINGLE_MMAP)) { errno = ENOTSUP; die("IORING_FEAT_SINGLE_MMAP"); }
    size_t sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    size_t cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    size_t len = sq_len > cq_len ? sq_len : cq_len;
    char *sq = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQ_RING);
    if (sq == MAP_FAILED) die("mmap rings");
    r->sq_tail = (unsigned *)(sq + p.sq_off.tail);
    r->sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
    r->sq_array = (unsigned *)(sq + p.sq_off.array);
    r->cq_head = (unsigned *)(sq + p.cq_off.head);
    r->cq_tail = (unsigned *)(sq + p.cq_off.tail);
    r->cq_mask = (unsigned *)(sq + p.cq_off.ring_mask);
    r->cqes = (struct io_uring_cqe *)(sq + p.cq_off.cqes);
    r->sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQES);
    if (r->sqes == MAP_FAILED) die("mmap sqes");
}

/* Queues one read (slot = buffer index, carried in user_data). */
static void queue_read(struct ring *r, int fd, void *buf, unsigned len, uint64_t off, unsigned slot, int async) {
    unsigned tail = *r->sq_tail, index = tail & *r->sq_mask;
    struct io_uring_sqe *sqe = &r->sqes[index];
    memset(sqe, 0, sizeof *sqe);
    sqe->opcode = IORING_OP_READ;
    sqe->fd = fd;
    sqe->addr = (uint64_t)(uintptr_t)buf;
    sqe->len = len;
    sqe->off = off;
    sqe->flags = async ? IOSQE_ASYNC : 0;
    sqe->user_data = slot;
    r->sq_array[index] = index;
    __atomic_store_n(r->sq_tail, tail + 1, __ATOMIC_RELEASE);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s FILE QD BS buffered|async|direct\n", argv[0]);
        return 2;
    }
    unsigned qd = (unsigned)atoi(argv[2]);
    size_t bs = (size_t)atoll(argv[3]);
    const char *mode = argv[4];
    int direct = strcmp(mode, "direct") == 0, async = strcmp(mode, "async") == 0;
    if (qd == 0 || qd > 256 || bs == 0 || bs % 4096 || (!direct && !async && strcmp(mode, "buffered"))) {
        fprintf(stderr, "probe-uring: bad arguments\n");
        return 2;
    }
    int fd = open(argv[1], O_RDONLY | (direct ? O_DIRECT : 0));
    if (fd < 0) die("open");
    struct stat st;
    if (fstat(fd, &st)) die("fstat");
    uint64_t size = (uint64_t)st.st_size;
    char **bufs = calloc(qd, sizeof *bufs);
    uint64_t *want_off = calloc(qd, sizeof *want_off);
    size_t *want_len = calloc(qd, sizeof *want_len);
    size_t *filled = calloc(qd, sizeof *filled); /* bytes of the slot's read done so far */
    unsigned *free_slots = calloc(qd, sizeof *free_slots);
    for (unsigned i = 0; i < qd; i++) {
        if (posix_memalign((void **)&bufs[i], 1 << 21, bs)) die("posix_memalign");
        memset(bufs[i], 0xA5, bs); /* touched: no page faults in the timed loop */
        free_slots[i] = i;
    }
    unsigned nfree = qd;
    struct ring r;
    ring_init(&r, qd);

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint64_t next = 0, done = 0;
    unsigned in_flight = 0, to_submit = 0; /* to_submit: queued since the last io_uring_enter */
    while (done < size) {
        while (nfree > 0 && next < size) {
            unsigned slot = free_slots[--nfree];
            size_t len = size - next < bs ? (size_t)(size - next) : bs;
            want_off[slot] = next;
            want_len[slot] = len;
            filled[slot] = 0;
            queue_read(&r, fd, bufs[slot], (unsigned)len, next, slot, async);
            next += len;
            to_submit++;
            in_flight++;
        }
        if (syscall(__NR_io_uring_enter, r.fd, to_submit, 1, IORING_ENTER_GETEVENTS, NULL, 0) < 0 && errno != EINTR)
            die("io_uring_enter");
        to_submit = 0;
        unsigned head = *r.cq_head, tail = __atomic_load_n(r.cq_tail, __ATOMIC_ACQUIRE);
        for (; head != tail; head++) {
            struct io_uring_cqe *cqe = &r.cqes[head & *r.cq_mask];
            unsigned slot = (unsigned)cqe->user_data;
            if (cqe->res < 0) {
                errno = -cqe->res;
                die("read");
            }
            size_t got = (size_t)cqe->res;
            done += got;
            in_flight--;
            if (got > 0 && got < want_len[slot]) { /* short: ask for the rest into the same buffer */
                want_off[slot] += got;
                want_len[slot] -= got;
                filled[slot] += got;
                queue_read(&r, fd, bufs[slot] + filled[slot], (unsigned)want_len[slot], want_off[slot], slot, async);
                to_submit++; /* submitted with the next io_uring_enter */
                in_flight++;
            } else if (got == 0 && want_len[slot] > 0) {
                fprintf(stderr, "probe-uring: unexpected end of file at %llu\n", (unsigned long long)want_off[slot]);
                return 1;
            } else {
                free_slots[nfree++] = slot;
            }
        }
        __atomic_store_n(r.cq_head, head, __ATOMIC_RELEASE);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("uring mode=%s qd=%u bs=%zu bytes=%llu gbps=%.3f\n", mode, qd, bs, (unsigned long long)size, (double)size / s / 1e9);
    return in_flight == 0 ? 0 : 1;
}
