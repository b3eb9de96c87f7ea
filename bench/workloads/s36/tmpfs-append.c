/* How fast a tmpfs file takes pages (BENCHMARKS.md, 36th stop, "How cold
 * memory gets here"): writes MIB MiB into a new file in /dev/shm in pieces
 * of 1 MiB, then N single pages after them, and prints the rate of the
 * first and the time per page of the second. Run it twice at once and
 * again some seconds later: on a VM whose host takes back the memory its
 * guest frees, the second run is fast and the third slow again.
 * Usage: cc -O2 -o tmpfs-append tmpfs-append.c && ./tmpfs-append MIB N */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s MIB PAGES\n", argv[0]);
        return 2;
    }
    long mib = atol(argv[1]);
    int n = atoi(argv[2]);
    char path[64];
    snprintf(path, sizeof path, "/dev/shm/tmpfs-append.%d", getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        perror(path);
        return 1;
    }
    unlink(path);
    char *big = malloc(1 << 20);
    memset(big, 3, 1 << 20);
    double t0 = now_us();
    for (long i = 0; i < mib; i++)
        if (pwrite(fd, big, 1 << 20, i << 20) != 1 << 20) {
            perror("pwrite");
            return 1;
        }
    double fill = now_us() - t0;
    char page[4096];
    memset(page, 7, sizeof page);
    off_t base = (off_t)mib << 20;
    double t1 = now_us();
    for (int i = 0; i < n; i++)
        if (pwrite(fd, page, sizeof page, base + (off_t)i * 4096) != sizeof page) {
            perror("pwrite");
            return 1;
        }
    double pages = now_us() - t1;
    printf("%ld MiB at %.2f GB/s; %d pages after them, %.2f us a page\n", mib,
           mib > 0 ? (double)(mib << 20) / fill / 1e3 : 0.0, n, n > 0 ? pages / n : 0.0);
    return 0;
}
