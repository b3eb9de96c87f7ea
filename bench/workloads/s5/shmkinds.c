// Shared memory of several kinds, each mapped twice (or read back through its fd):
// writes through one view, checks through the other, prints checksums per round.
// Usage: shmkinds posix|memfd|sysv|anon|devshm ROUNDS
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <sys/stat.h>
#define SZ (64UL << 20)
int main(int argc, char **argv) {
    const char *mode = argv[1];
    long rounds = argc > 2 ? atol(argv[2]) : 20;
    unsigned char *a = NULL, *b = NULL;
    int fd = -1, shmid = -1;
    char name[64];
    snprintf(name, sizeof name, "/pmig-s5-%d", getpid());
    if (!strcmp(mode, "posix") || !strcmp(mode, "devshm")) {
        if (!strcmp(mode, "posix")) fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
        else { char p[128]; snprintf(p, sizeof p, "/dev/shm%s", name); fd = open(p, O_RDWR | O_CREAT | O_EXCL, 0600); }
        if (fd < 0 || ftruncate(fd, SZ)) { perror("open"); return 1; }
    } else if (!strcmp(mode, "memfd")) {
        fd = memfd_create("pmig-s5", MFD_CLOEXEC);
        if (fd < 0 || ftruncate(fd, SZ)) { perror("memfd"); return 1; }
    }
    if (fd >= 0) {
        a = mmap(NULL, SZ, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        b = mmap(NULL, SZ, PROT_READ, MAP_SHARED, fd, 0);
    } else if (!strcmp(mode, "sysv")) {
        shmid = shmget(IPC_PRIVATE, SZ, IPC_CREAT | 0600);
        if (shmid < 0) { perror("shmget"); return 1; }
        a = shmat(shmid, NULL, 0);
        b = shmat(shmid, NULL, SHM_RDONLY);
    } else if (!strcmp(mode, "anon")) {
        a = mmap(NULL, SZ, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        b = mremap(a, 0, SZ, MREMAP_MAYMOVE);  // a second view of the same shared pages
    } else { fprintf(stderr, "mode?\n"); return 2; }
    if (a == MAP_FAILED || b == MAP_FAILED || !a || !b) { perror("map"); return 1; }
    for (size_t i = 0; i < SZ; i++) a[i] = (unsigned char)(i * 131 + 7);
    uint64_t x = 0x9E3779B97F4A7C15ULL;
    for (long r = 0; r < rounds; r++) {
        for (int k = 0; k < 3000000; k++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            size_t i = x % SZ;
            a[i] = (unsigned char)(a[i] * 3 + (x >> 56));
        }
        uint64_t sa = 0, sb = 0; long diff = 0;
        for (size_t i = 0; i < SZ; i += 8) {
            uint64_t va = *(uint64_t *)(a + i), vb = *(uint64_t *)(b + i);
            sa = sa * 1000003 + va; sb = sb * 1000003 + vb; diff += va != vb;
        }
        long fddiff = -1;
        if (fd >= 0) {  // the file's content through read(2)
            static unsigned char buf[1 << 20];
            fddiff = 0;
            for (size_t off = 0; off < SZ; off += sizeof buf) {
                if (pread(fd, buf, sizeof buf, off) != (ssize_t)sizeof buf) { fddiff = -2; break; }
                fddiff += memcmp(buf, a + off, sizeof buf) != 0;
            }
        }
        printf("round %ld sumA %016llx sumB %016llx viewsDiffer %ld fdDiffer %ld\n", r,
               (unsigned long long)sa, (unsigned long long)sb, diff, fddiff);
        fflush(stdout);
    }
    if (!strcmp(mode, "posix")) shm_unlink(name);
    if (!strcmp(mode, "devshm")) { char p[128]; snprintf(p, sizeof p, "/dev/shm%s", name); unlink(p); }
    if (shmid >= 0) {
        struct shmid_ds ds; shmctl(shmid, IPC_STAT, &ds);
        printf("sysv nattch %lu segsz %zu\n", (unsigned long)ds.shm_nattch, ds.shm_segsz);
        shmctl(shmid, IPC_RMID, NULL);
    }
    return 0;
}
