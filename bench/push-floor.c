/* push-floor.c - the CPU that the unavoidable steps of moving memory
 * between two processes cost, each measured alone (BENCHMARKS.md, "What
 * the push could reach on one machine"). bench/push-floor.sh runs it.
 *
 *   push-floor pvm MIB CHUNK_KIB     a child fills MIB MiB; the parent reads
 *                                    it with process_vm_readv, CHUNK_KIB at
 *                                    a time (the source's copy out of the
 *                                    frozen process)
 *   push-floor uffd MIB CHUNK_KIB    UFFDIO_COPY of MIB MiB into a fresh
 *                                    region registered for missing pages,
 *                                    CHUNK_KIB per call (the destination's
 *                                    install)
 *   push-floor recv PORT             accepts one TCP connection and reads it
 *                                    to its end
 *   push-floor send ADDR PORT MIB    connects and writes MIB MiB, 1 MiB per
 *                                    write (raw TCP)
 *
 * Each prints one line: `<mode> bytes=N wall_s=W cpu_s=C gbps=G
 * cpu_s_per_gib=P`, where C is the CPU time of this process (user and
 * system; pvm and uffd touch every page of their source first, outside
 * the timing). Work done in softirq context on behalf of a socket may be
 * charged to whichever task was running: the script therefore also counts
 * the whole machine's busy time.
 * Build: cc -O2 -o push-floor bench/push-floor.c */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double clock_s(clockid_t c)
{
    struct timespec t;
    clock_gettime(c, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void report(const char *mode, size_t bytes, double w0, double c0)
{
    double wall = clock_s(CLOCK_MONOTONIC) - w0;
    double cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    double gib = bytes / (double)(1UL << 30);
    printf("%s bytes=%zu wall_s=%.3f cpu_s=%.3f gbps=%.3f cpu_s_per_gib=%.3f\n", mode, bytes,
           wall, cpu, bytes / wall / 1e9, cpu / gib);
}

static int die(const char *what)
{
    fprintf(stderr, "push-floor: %s: %s\n", what, strerror(errno));
    return 1;
}

static int pvm(size_t sz, size_t chunk)
{
    int p[2];
    if (pipe(p) != 0)
        return die("pipe");
    pid_t c = fork();
    if (c < 0)
        return die("fork");
    if (c == 0) {
        char *m = mmap(0, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            _exit(1);
        for (size_t i = 0; i < sz; i += 8)
            *(size_t *)(m + i) = i * 7 + 1;
        if (write(p[1], &m, sizeof m) != sizeof m)
            _exit(1);
        pause();
        _exit(0);
    }
    char *m;
    if (read(p[0], &m, sizeof m) != sizeof m)
        return die("child");
    char *buf = aligned_alloc(4096, chunk);
    memset(buf, 0, chunk);
    double w0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    for (size_t off = 0; off < sz; off += chunk) {
        struct iovec l = {buf, chunk}, r = {m + off, chunk};
        if (process_vm_readv(c, &l, 1, &r, 1, 0) != (ssize_t)chunk) {
            kill(c, SIGKILL);
            return die("process_vm_readv");
        }
    }
    report("pvm", sz, w0, c0);
    kill(c, SIGKILL);
    waitpid(c, NULL, 0);
    return 0;
}

static int uffd(size_t sz, size_t chunk)
{
    int fd = syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY);
    if (fd < 0)
        return die("userfaultfd");
    struct uffdio_api api = {.api = UFFD_API};
    if (ioctl(fd, UFFDIO_API, &api) != 0)
        return die("UFFDIO_API");
    char *dst = mmap(0, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (dst == MAP_FAILED)
        return die("mmap");
    struct uffdio_register reg = {
        .range = {(unsigned long)dst, sz},
        .mode = UFFDIO_REGISTER_MODE_MISSING,
    };
    if (ioctl(fd, UFFDIO_REGISTER, &reg) != 0)
        return die("UFFDIO_REGISTER");
    char *src = aligned_alloc(4096, chunk);
    for (size_t i = 0; i < chunk; i += 8)
        *(size_t *)(src + i) = i * 7 + 1;
    double w0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    for (size_t off = 0; off < sz; off += chunk) {
        struct uffdio_copy cp = {
            .dst = (unsigned long)dst + off, .src = (unsigned long)src, .len = chunk};
        if (ioctl(fd, UFFDIO_COPY, &cp) != 0 || cp.copy != (long)chunk)
            return die("UFFDIO_COPY");
    }
    report("uffd", sz, w0, c0);
    /* The pages are really there: one value read back per page. */
    for (size_t off = 0; off < sz; off += 4096)
        if (*(size_t *)(dst + off) != (off % chunk) * 7 + 1) {
            fprintf(stderr, "push-floor: the page at offset %zu does not hold its data\n", off);
            return 1;
        }
    return 0;
}

static int recv_side(int port)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (s < 0)
        return die("socket");
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (bind(s, (struct sockaddr *)&a, sizeof a) != 0 || listen(s, 1) != 0)
        return die("bind");
    printf("listening\n");
    fflush(stdout);
    int c = accept4(s, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0)
        return die("accept");
    size_t len = 1 << 20, total = 0;
    char *buf = aligned_alloc(4096, len);
    memset(buf, 0, len);
    double w0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    for (;;) {
        ssize_t n = read(c, buf, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return die("read");
        if (n == 0)
            break;
        total += n;
    }
    report("recv", total, w0, c0);
    return 0;
}

static int send_side(const char *addr, int port, size_t sz)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return die("socket");
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (inet_pton(AF_INET, addr, &a.sin_addr) != 1) {
        fprintf(stderr, "push-floor: bad address %s\n", addr);
        return 2;
    }
    if (connect(s, (struct sockaddr *)&a, sizeof a) != 0)
        return die("connect");
    size_t len = 1 << 20;
    char *buf = aligned_alloc(4096, len);
    for (size_t i = 0; i < len; i += 8)
        *(size_t *)(buf + i) = i * 7 + 1;
    double w0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    for (size_t off = 0; off < sz;) {
        ssize_t n = write(s, buf, len < sz - off ? len : sz - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return die("write");
        off += n;
    }
    shutdown(s, SHUT_WR);
    /* Wait for the receiver's close, so the time covers the delivery. */
    char b;
    while (read(s, &b, 1) > 0)
        ;
    report("send", sz, w0, c0);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "pvm"))
        return pvm(strtoul(argv[2], NULL, 10) << 20, strtoul(argv[3], NULL, 10) << 10);
    if (argc == 4 && !strcmp(argv[1], "uffd"))
        return uffd(strtoul(argv[2], NULL, 10) << 20, strtoul(argv[3], NULL, 10) << 10);
    if (argc == 3 && !strcmp(argv[1], "recv"))
        return recv_side(atoi(argv[2]));
    if (argc == 5 && !strcmp(argv[1], "send"))
        return send_side(argv[2], atoi(argv[3]), strtoul(argv[4], NULL, 10) << 20);
    fprintf(stderr, "usage: push-floor pvm|uffd MIB CHUNK_KIB | recv PORT | send ADDR PORT MIB\n");
    return 2;
}
