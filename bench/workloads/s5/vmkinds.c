// Unusual mappings: mlock, MADV_HUGEPAGE, MADV_DONTDUMP, MADV_WIPEONFORK, MADV_DONTFORK,
// MAP_NORESERVE 16 GiB sparse, PROT_NONE guard, MAP_GROWSDOWN; computes, then prints each
// region's VmFlags (from smaps), VmLck, and content checksums.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <unistd.h>
#include <sys/mman.h>
#define MB (1UL << 20)
struct reg { const char *name; unsigned char *p; size_t len; };
static void flags_of(void *p, char *out, size_t n) {
    FILE *f = fopen("/proc/self/smaps", "r"); char line[512]; int in = 0; out[0] = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) { in = (uintptr_t)p >= lo && (uintptr_t)p < hi; continue; }
        if (in && !strncmp(line, "VmFlags:", 8)) { snprintf(out, n, "%s", line + 9); out[strcspn(out, "\n")] = 0; break; }
    }
    fclose(f);
}
static uint64_t sum(unsigned char *p, size_t len) { uint64_t s = 0; for (size_t i = 0; i < len; i += 64) s = s * 131 + p[i]; return s; }
int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 15;
    struct reg r[8]; int n = 0;
    int prot = PROT_READ | PROT_WRITE, fl = MAP_PRIVATE | MAP_ANONYMOUS;
    r[n] = (struct reg){"locked", mmap(NULL, 8 * MB, prot, fl, -1, 0), 8 * MB}; mlock(r[n].p, r[n].len); n++;
    r[n] = (struct reg){"hugepage", mmap(NULL, 64 * MB, prot, fl, -1, 0), 64 * MB}; madvise(r[n].p, r[n].len, MADV_HUGEPAGE); n++;
    r[n] = (struct reg){"dontdump", mmap(NULL, 8 * MB, prot, fl, -1, 0), 8 * MB}; madvise(r[n].p, r[n].len, MADV_DONTDUMP); n++;
    r[n] = (struct reg){"wipeonfork", mmap(NULL, 8 * MB, prot, fl, -1, 0), 8 * MB}; madvise(r[n].p, r[n].len, MADV_WIPEONFORK); n++;
    r[n] = (struct reg){"dontfork", mmap(NULL, 8 * MB, prot, fl, -1, 0), 8 * MB}; madvise(r[n].p, r[n].len, MADV_DONTFORK); n++;
    r[n] = (struct reg){"noreserve16G", mmap(NULL, 16UL << 30, prot, fl | MAP_NORESERVE, -1, 0), 16UL << 30}; n++;
    r[n] = (struct reg){"growsdown", mmap(NULL, 1 * MB, prot, fl | MAP_GROWSDOWN, -1, 0), 1 * MB}; n++;
    unsigned char *guard = mmap(NULL, 4 * MB, PROT_NONE, fl, -1, 0);
    for (int i = 0; i < n; i++) if (r[i].p == MAP_FAILED) { perror(r[i].name); return 1; }
    for (int i = 0; i < n; i++) {
        size_t len = i == 5 ? 256 * MB : r[i].len;  // sparse: touch a 256 MiB stripe only
        for (size_t j = 0; j < len; j += 4096) r[i].p[j] = (unsigned char)(j / 4096 * 7 + i);
    }
    uint64_t x = 0x9E3779B97F4A7C15ULL;
    for (long k = 0; k < rounds; k++) {
        for (int it = 0; it < 4000000; it++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            int i = x % n; size_t len = i == 5 ? 256 * MB : r[i].len;
            r[i].p[(x >> 8) % len] += 1;
        }
        uint64_t s = 0; for (int i = 0; i < n; i++) s = s * 7 + sum(r[i].p, i == 5 ? 256 * MB : r[i].len);
        printf("round %ld sum %016llx\n", k, (unsigned long long)s);
        if (argc > 2) for (int i = 0; i < n; i++) printf("  %s %016llx\n", r[i].name, (unsigned long long)sum(r[i].p, i == 5 ? 256 * MB : r[i].len));
        fflush(stdout);
    }
    char fbuf[256];
    for (int i = 0; i < n; i++) { flags_of(r[i].p, fbuf, sizeof fbuf); printf("%s: %s\n", r[i].name, fbuf); }
    flags_of(guard, fbuf, sizeof fbuf); printf("guard: %s\n", fbuf);
    FILE *f = fopen("/proc/self/status", "r"); char line[256];
    while (fgets(line, sizeof line, f)) if (!strncmp(line, "VmLck", 5)) fputs(line, stdout);
    fclose(f);
    return 0;
}
