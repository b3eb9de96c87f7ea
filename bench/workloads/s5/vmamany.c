// Many small mappings: N one-page anonymous mmaps with alternating protections (so they do
// not merge), each holding a pattern; computes, rewrites some, checksums all every round.
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <sys/mman.h>
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 30000; long rounds = argc > 2 ? atol(argv[2]) : 60;
    unsigned char **p = malloc(n * sizeof *p);
    for (int i = 0; i < n; i++) {
        p[i] = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p[i] == MAP_FAILED) { perror("mmap"); return 1; }
        for (int j = 0; j < 4096; j += 64) p[i][j] = (unsigned char)(i + j);
        if (i % 2) mprotect(p[i], 4096, PROT_READ);
    }
    uint64_t x = 1;
    for (long r = 0; r < rounds; r++) {
        for (long k = 0; k < 20000000; k++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; }
        for (int k = 0; k < 1000; k++) { int i = (x + k * 7919) % n; i &= ~1; p[i][(k * 64) % 4096] += 1; }
        uint64_t s = 0; for (int i = 0; i < n; i++) for (int j = 0; j < 4096; j += 64) s = s * 31 + p[i][j];
        printf("round %ld %016llx\n", r, (unsigned long long)s); fflush(stdout);
    }
    return 0;
}
