// Memory that the program itself empties, moves and protects while it runs:
// a 256 MiB anonymous region whose pages are written (each with its page
// number and a version), dropped with MADV_DONTNEED (they must read zero),
// freed with MADV_FREE (old content or zero, until written again), made
// read-only and writable again, and moved away and back with mremap. A model
// of every page's expected content is checked at random and, at the end, in
// full; the output is the same on every run unless a page is wrong.
// Usage: madvwork [OPS [nomove]]  (nomove: no mremap, the rest in the same order)
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096UL
#define PAGES (256UL * 1024 * 1024 / PAGE)
enum { ZERO, WRITTEN, FREED };
static unsigned char *mem, *spare;
static uint32_t version[PAGES];
static unsigned char state[PAGES];
static long bad;

static uint64_t next(uint64_t *s) { *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; return *s; }
static void put(size_t pg, uint32_t v) {
    uint64_t w = ((uint64_t)pg << 32) | v;
    unsigned char *p = mem + pg * PAGE;
    memcpy(p, &w, 8); memcpy(p + PAGE / 2, &w, 8); memcpy(p + PAGE - 8, &w, 8);
    version[pg] = v; state[pg] = WRITTEN;
}
static int is(size_t pg, uint64_t w) {
    const unsigned char *p = mem + pg * PAGE;
    return !memcmp(p, &w, 8) && !memcmp(p + PAGE / 2, &w, 8) && !memcmp(p + PAGE - 8, &w, 8);
}
static void verify(size_t pg, long op) {
    uint64_t w = ((uint64_t)pg << 32) | version[pg];
    int ok = state[pg] == ZERO ? is(pg, 0) : state[pg] == WRITTEN ? is(pg, w) : (is(pg, 0) || is(pg, w));
    if (!ok) {
        if (bad++ < 10) {
            struct timespec t; clock_gettime(CLOCK_REALTIME, &t);
            const unsigned char *p = mem + pg * PAGE;
            uint64_t w0, w1; memcpy(&w0, p, 8); memcpy(&w1, p + PAGE - 8, 8);
            fprintf(stderr, "%ld.%06ld page %zu wrong at op %ld (state %d version %u) at %p: holds %llx %llx\n",
                    (long)t.tv_sec, t.tv_nsec / 1000, pg, op, state[pg], version[pg], (void *)p, (unsigned long long)w0,
                    (unsigned long long)w1);
        }
    }
}
int main(int argc, char **argv) {
    long ops = argc > 1 ? atol(argv[1]) : 12000000;
    int moves = !(argc > 2 && !strcmp(argv[2], "nomove"));
    mem = mmap(NULL, PAGES * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    // Where pages are moved to and back from: reserved, so that a fixed move
    // replaces nothing else.
    spare = mmap(NULL, 1024 * PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED || spare == MAP_FAILED) { perror("mmap"); return 1; }
    for (size_t pg = 0; pg < PAGES; pg++) put(pg, 1);
    uint64_t s = 0x2545F4914F6CDD1DULL;
    long counts[6] = {0};
    for (long op = 0; op < ops; op++) {
        unsigned k = next(&s) % 1000;
        size_t pg = next(&s) % PAGES;
        if (k < 700) {                       // write one page
            put(pg, version[pg] + 1); counts[0]++;
        } else if (k < 950) {                // read one page back
            verify(pg, op); counts[1]++;
        } else if (k < 975) {                // drop up to 64 pages
            size_t n = 1 + next(&s) % 64; if (pg + n > PAGES) n = PAGES - pg;
            if (madvise(mem + pg * PAGE, n * PAGE, MADV_DONTNEED)) { perror("madvise DONTNEED"); return 1; }
            for (size_t i = 0; i < n; i++) { state[pg + i] = ZERO; version[pg + i] = 0; }
            counts[2]++;
        } else if (k < 990) {                // free up to 64 pages lazily
            size_t n = 1 + next(&s) % 64; if (pg + n > PAGES) n = PAGES - pg;
            if (madvise(mem + pg * PAGE, n * PAGE, MADV_FREE)) { perror("madvise FREE"); return 1; }
            for (size_t i = 0; i < n; i++) if (state[pg + i] == WRITTEN) state[pg + i] = FREED;
            counts[3]++;
        } else if (k < 995) {                // read-only for a moment, then writable again
            size_t n = 1 + next(&s) % 256; if (pg + n > PAGES) n = PAGES - pg;
            if (mprotect(mem + pg * PAGE, n * PAGE, PROT_READ)) { perror("mprotect"); return 1; }
            for (size_t i = 0; i < n; i += 17) verify(pg + i, op);
            if (mprotect(mem + pg * PAGE, n * PAGE, PROT_READ | PROT_WRITE)) { perror("mprotect"); return 1; }
            counts[4]++;
        } else if (!moves) {
            counts[5]++;
        } else {                             // move up to 1024 pages away and back
            size_t n = 1 + next(&s) % 1024; if (pg + n > PAGES) n = PAGES - pg;
            unsigned char *away = mremap(mem + pg * PAGE, n * PAGE, n * PAGE, MREMAP_MAYMOVE | MREMAP_FIXED, spare);
            if (away == MAP_FAILED) { perror("mremap away"); return 1; }
            uint64_t w = ((uint64_t)(pg + n / 2) << 32) | version[pg + n / 2];
            if (state[pg + n / 2] == WRITTEN && memcmp(away + (n / 2) * PAGE, &w, 8)) {
                bad++; fprintf(stderr, "moved page wrong at op %ld\n", op);
            }
            if (mremap(away, n * PAGE, n * PAGE, MREMAP_MAYMOVE | MREMAP_FIXED, mem + pg * PAGE) == MAP_FAILED) {
                perror("mremap back"); return 1;
            }
            // The spare area's hole is ours again before anything else can map there.
            if (mmap(spare, n * PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED) {
                perror("mmap spare"); return 1;
            }
            counts[5]++;
        }
    }
    for (size_t pg = 0; pg < PAGES; pg++) verify(pg, ops);
    uint64_t h = 0;
    for (size_t pg = 0; pg < PAGES; pg++) h = h * 1000003 + version[pg] * 3 + state[pg];
    printf("writes %ld reads %ld dontneed %ld free %ld protect %ld moves %ld model %llx\n", counts[0], counts[1],
           counts[2], counts[3], counts[4], counts[5], (unsigned long long)h);
    printf(bad ? "FAILED: %ld wrong pages\n" : "ok\n", bad);
    return bad != 0;
}
