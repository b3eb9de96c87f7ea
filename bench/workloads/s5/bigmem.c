// A big process: GIB GiB of anonymous memory filled, then rounds that rewrite a slice and
// checksum everything. Usage: bigmem GIB ROUNDS
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <sys/mman.h>
int main(int argc, char **argv) {
    size_t gib = argc > 1 ? atol(argv[1]) : 2; long rounds = argc > 2 ? atol(argv[2]) : 10; size_t writes = argc > 3 ? atol(argv[3]) : 2000000;
    size_t n = gib << 27;  // uint64 words
    uint64_t *a = mmap(NULL, n * 8, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    for (size_t i = 0; i < n; i++) a[i] = i * 0x9E3779B97F4A7C15ULL;
    uint64_t x = 1;
    for (long r = 0; r < rounds; r++) {
        for (size_t k = 0; k < writes; k++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; a[x % n] += x; }
        uint64_t s = 0; for (size_t i = 0; i < n; i += 8) s = s * 31 + a[i];
        printf("round %ld sum %016llx\n", r, (unsigned long long)s); fflush(stdout);
    }
    return 0;
}
