// An mlock()ed 8 MiB region (or MAP_LOCKED with arg "maplocked", or mlockall with "all") filled
// with a pattern; computes, prints the region's checksum every round.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/mman.h>
int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 40; const char *m = argc > 2 ? argv[2] : "mlock";
    size_t len = 8 << 20;
    if (!strcmp(m, "all")) mlockall(MCL_CURRENT | MCL_FUTURE);
    unsigned char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | (!strcmp(m, "maplocked") ? MAP_LOCKED : 0), -1, 0);
    if (!strcmp(m, "mlock")) mlock(p, len);
    for (size_t i = 0; i < len; i++) p[i] = (unsigned char)(i * 7 + 1);
    uint64_t x = 1;
    for (long r = 0; r < rounds; r++) {
        for (long i = 0; i < 30000000; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; }
        p[x % len] ^= 1;
        uint64_t s = 0; size_t nz = 0; for (size_t i = 0; i < len; i++) { s = s * 31 + p[i]; nz += p[i] != 0; }
        printf("round %ld sum %016llx nonzero %zu\n", r, (unsigned long long)s, nz); fflush(stdout);
    }
    return 0;
}
