// Holds an io_uring instance (raw syscalls) with one completed NOP not yet reaped; computes,
// then reaps it.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <linux/io_uring.h>
int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 15;
    struct io_uring_params p; memset(&p, 0, sizeof p);
    int fd = syscall(__NR_io_uring_setup, 8, &p);
    if (fd < 0) { perror("io_uring_setup"); return 1; }
    size_t sql = p.sq_off.array + p.sq_entries * 4, cql = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    char *sq = mmap(NULL, sql, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_SQ_RING);
    char *cq = mmap(NULL, cql, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_CQ_RING);
    struct io_uring_sqe *sqes = mmap(NULL, p.sq_entries * sizeof *sqes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_SQES);
    unsigned *tail = (unsigned *)(sq + p.sq_off.tail), *arr = (unsigned *)(sq + p.sq_off.array);
    memset(&sqes[0], 0, sizeof sqes[0]); sqes[0].opcode = IORING_OP_NOP; sqes[0].user_data = 777;
    arr[0] = 0; __atomic_store_n(tail, 1, __ATOMIC_RELEASE);
    int sub = syscall(__NR_io_uring_enter, fd, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0);
    printf("submitted %d\n", sub); fflush(stdout);
    uint64_t x = 88172645463325252ULL, s = 0;
    for (long r = 0; r < rounds; r++) {
        for (long i = 0; i < 60000000; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; s += x >> 60; }
        printf("round %ld %llx\n", r, (unsigned long long)s); fflush(stdout);
    }
    unsigned head = *(unsigned *)(cq + p.cq_off.head), ctail = __atomic_load_n((unsigned *)(cq + p.cq_off.tail), __ATOMIC_ACQUIRE);
    struct io_uring_cqe *cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
    printf("cq entries %u user_data %llu res %d\n", ctail - head, ctail > head ? (unsigned long long)cqes[head & *(unsigned *)(cq + p.cq_off.ring_mask)].user_data : 0ULL,
           ctail > head ? cqes[head & *(unsigned *)(cq + p.cq_off.ring_mask)].res : -1);
    return 0;
}
