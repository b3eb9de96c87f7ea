/* What cutting a tmpfs file costs (BENCHMARKS.md, 36th stop, "The room left
 * past the page data"): writes MIB MiB of zeros into a new file in /dev/shm,
 * then truncates it to nothing and prints how long that took.
 * Usage: cc -O2 -o tmpfs-truncate tmpfs-truncate.c && ./tmpfs-truncate MIB */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
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
    if (argc != 2) {
        fprintf(stderr, "usage: %s MIB\n", argv[0]);
        return 2;
    }
    long mib = atol(argv[1]);
    char path[64];
    snprintf(path, sizeof path, "/dev/shm/tmpfs-truncate.%d", getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        perror(path);
        return 1;
    }
    unlink(path);
    char *z = calloc(1, 1 << 20);
    for (long i = 0; i < mib; i++)
        if (pwrite(fd, z, 1 << 20, i << 20) != 1 << 20) {
            perror("pwrite");
            return 1;
        }
    double t = now_us();
    if (ftruncate(fd, 0) != 0) {
        perror("ftruncate");
        return 1;
    }
    printf("%ld MiB cut off in %.1f us\n", mib, now_us() - t);
    return 0;
}
