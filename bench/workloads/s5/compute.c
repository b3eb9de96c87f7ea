// Deterministic compute loop: prints a checksum every round. Usage: compute ROUNDS ITERS
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 20, iters = argc > 2 ? atol(argv[2]) : 20000000;
    static uint64_t buf[1 << 16];
    uint64_t x = 88172645463325252ULL;
    for (long r = 0; r < rounds; r++) {
        for (long i = 0; i < iters; i++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            buf[x & 0xffff] += x;
        }
        uint64_t s = 0;
        for (int i = 0; i < (1 << 16); i++) s = s * 31 + buf[i];
        printf("round %ld sum %016llx\n", r, (unsigned long long)s);
        fflush(stdout);
    }
    return 0;
}
