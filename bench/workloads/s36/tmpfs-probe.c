/* Two probes of tmpfs on this VM (BENCHMARKS.md, 36th stop).
 *
 *   tmpfs-probe append MIB N   writes MIB MiB into a new file in /dev/shm in
 *       pieces of 1 MiB, then N single pages after them, and prints the rate
 *       of the first and the time per page of the second. Run it twice at
 *       once and again some seconds later: on a VM whose host takes back the
 *       memory its guest frees, the second run is fast, the third slow again
 *       ("How cold memory gets here").
 *   tmpfs-probe truncate MIB   writes MIB MiB of zeros into a new file, cuts
 *       it to nothing and prints how long that took ("The room left past the
 *       page data").
 *
 * Usage: cc -O2 -o tmpfs-probe tmpfs-probe.c && ./tmpfs-probe append 4096 3000 */
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

/* Writes `mib` MiB of `byte` from offset 0; returns the seconds it took, or
 * a negative number on failure. */
static double fill(int fd, long mib, int byte)
{
    char *buf = malloc(1 << 20);
    if (!buf)
        return -1;
    memset(buf, byte, 1 << 20);
    double t = now_us();
    for (long i = 0; i < mib; i++)
        if (pwrite(fd, buf, 1 << 20, i << 20) != 1 << 20) {
            perror("pwrite");
            free(buf);
            return -1;
        }
    free(buf);
    return (now_us() - t) / 1e6;
}

int main(int argc, char **argv)
{
    int append = argc == 4 && strcmp(argv[1], "append") == 0;
    int truncate = argc == 3 && strcmp(argv[1], "truncate") == 0;
    if (!append && !truncate) {
        fprintf(stderr, "usage: %s append MIB PAGES | truncate MIB\n", argv[0]);
        return 2;
    }
    long mib = atol(argv[2]);
    char path[64];
    snprintf(path, sizeof path, "/dev/shm/tmpfs-probe.%d", getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        perror(path);
        return 1;
    }
    unlink(path);
    double secs = fill(fd, mib, append ? 3 : 0);
    if (secs < 0)
        return 1;
    if (truncate) {
        double t = now_us();
        if (ftruncate(fd, 0) != 0) {
            perror("ftruncate");
            return 1;
        }
        printf("%ld MiB cut off in %.1f us\n", mib, now_us() - t);
        return 0;
    }
    int n = atoi(argv[3]);
    char page[4096];
    memset(page, 7, sizeof page);
    off_t base = (off_t)mib << 20;
    double t = now_us();
    for (int i = 0; i < n; i++)
        if (pwrite(fd, page, sizeof page, base + (off_t)i * 4096) != sizeof page) {
            perror("pwrite");
            return 1;
        }
    double per_page = n > 0 ? (now_us() - t) / n : 0.0;
    printf("%ld MiB at %.2f GB/s; %d pages after them, %.2f us a page\n", mib,
           secs > 0 ? (double)(mib << 20) / secs / 1e9 : 0.0, n, per_page);
    return 0;
}
