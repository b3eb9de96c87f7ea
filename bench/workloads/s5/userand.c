#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 20;
    srand(42);
    unsigned long s = 0;
    for (long r = 0; r < rounds; r++) {
        for (long i = 0; i < 10000000; i++) s = s * 31 + (unsigned)rand();
        printf("round %ld %lx\n", r, s); fflush(stdout);
    }
    return 0;
}
