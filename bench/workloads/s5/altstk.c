// No sigaltstack; a SIGUSR1 handler with SA_ONSTACK. Computes, then reports the alternate
// stack (and whether its memory is mapped), raises SIGUSR1 and reports where the handler ran.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <signal.h>
#include <unistd.h>
static volatile int onstack = -1;
static void h(int s) { (void)s; stack_t ss; sigaltstack(NULL, &ss); onstack = (ss.ss_flags & SS_ONSTACK) != 0; }
static const char *mapping_of(uintptr_t a) {
    static char out[300]; FILE *f = fopen("/proc/self/maps", "r"); char line[300]; strcpy(out, "unmapped");
    while (fgets(line, sizeof line, f)) { unsigned long lo, hi; if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && a >= lo && a < hi) {
        char *p = strchr(line, '/'); if (!p) p = strchr(line, '['); snprintf(out, sizeof out, "mapped %s", p ? p : "(anonymous)"); out[strcspn(out, "\n")] = 0; break; } }
    fclose(f); return out;
}
int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 60;
    struct sigaction sa = {0}; sa.sa_handler = h; sa.sa_flags = SA_ONSTACK; sigaction(SIGUSR1, &sa, NULL);
    uint64_t x = 1, s = 0;
    for (long r = 0; r < rounds; r++) {
        for (long i = 0; i < 50000000; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; s += x >> 60; }
        printf("round %ld %llx\n", r, (unsigned long long)s); fflush(stdout);
    }
    stack_t ss; sigaltstack(NULL, &ss);
    printf("altstack %s size %zu %s\n", ss.ss_flags & SS_DISABLE ? "disabled" : "ENABLED", ss.ss_size,
           ss.ss_flags & SS_DISABLE ? "" : mapping_of((uintptr_t)ss.ss_sp));
    fflush(stdout);
    raise(SIGUSR1);
    printf("handler ran on the alternate stack: %d\n", onstack);
    return 0;
}
