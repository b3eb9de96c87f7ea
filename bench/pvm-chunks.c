/* pvm-chunks.c - how fast process_vm_readv copies 1 GiB out of another
 * process, by the size of each read (BENCHMARKS.md, "Standard input that
 * moves", the push's costs). A child fills 1 GiB of private memory and
 * waits; the parent reads it all three times per size.
 * Build and run: cc -O2 -o /tmp/pvm-chunks bench/pvm-chunks.c && /tmp/pvm-chunks KIB */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    size_t sz = 1UL << 30;
    size_t chunk = (argc > 1 ? strtoul(argv[1], NULL, 10) : 1024) << 10;
    int p[2];
    if (chunk == 0 || sz % chunk || pipe(p) != 0)
        return 2;
    pid_t c = fork();
    if (c == 0) {
        char *m = mmap(0, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            _exit(1);
        for (size_t i = 0; i < sz; i += 8)
            *(size_t *)(m + i) = i * 7;
        if (write(p[1], &m, sizeof m) != sizeof m)
            _exit(1);
        pause();
        _exit(0);
    }
    char *m;
    if (read(p[0], &m, sizeof m) != sizeof m)
        return 1;
    char *buf = aligned_alloc(4096, chunk);
    memset(buf, 0, chunk);
    for (int r = 0; r < 3; r++) {
        double t0 = now();
        for (size_t off = 0; off < sz; off += chunk) {
            struct iovec l = { buf, chunk }, rr = { m + off, chunk };
            if (process_vm_readv(c, &l, 1, &rr, 1, 0) != (ssize_t)chunk) {
                perror("process_vm_readv");
                kill(c, SIGKILL);
                return 1;
            }
        }
        printf("chunk %zu KiB pass %d: %.2f GB/s\n", chunk >> 10, r, sz / (now() - t0) / 1e9);
    }
    kill(c, SIGKILL);
    return 0;
}
