/*
 * sparsetouch - a large reserved mapping used sparsely, checked against a
 * model of every page (the thirtieth sweep, bench/sweep30-cases.txt).
 *
 * Maps 4 GiB of private anonymous memory (MAP_NORESERVE), its first
 * 64 MiB allowed huge pages, and for STEPS steps (default 10,000,000, a
 * pause of 1 ms every 1,000) picks a page at random, one time in eight in
 * those 64 MiB, else among 4,000 clusters of 8 pages 1 MiB apart across
 * the rest (at most about 190 MiB are ever populated), and:
 *   - 70 %: writes the step number into two words of it (a first touch,
 *     often, in a page table never used before);
 *   - 1 %: releases the 2 MiB around it (MADV_DONTNEED), which must read
 *     as zeros from then on;
 *   - 29 %: reads those two words and checks them against the model.
 * At the end every page is checked (the model's value, or zeros), and
 * the program prints one line that depends only on STEPS and the seed:
 * the pages written, the releases, and a hash of the model. A mismatch
 * prints the page and exits 1.
 *
 * Usage: sparsetouch [STEPS [SEED]]
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define PAGE 4096UL
#define SPAN (2UL << 20)
#define SIZE (4UL << 30)
#define PAGES (SIZE / PAGE)
#define HUGE (64UL << 20)

static uint64_t rng;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void check(const uint8_t *m, const uint32_t *model, uint64_t p, const char *when)
{
    const uint32_t *w = (const uint32_t *)(m + p * PAGE);
    uint32_t want = model[p];
    uint32_t second = want ? w[want % 1024] : w[1];
    if (w[0] != want || second != want) {
        printf("page %" PRIu64 " holds %u/%u, the model %u (%s)\n", p, w[0], second, want, when);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    uint64_t steps = argc > 1 ? strtoull(argv[1], 0, 10) : 10000000;
    rng = argc > 2 ? strtoull(argv[2], 0, 10) : 88172645463325252ULL;
    uint8_t *m = mmap(0, SIZE, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    uint32_t *model = calloc(PAGES, sizeof *model);
    if (m == MAP_FAILED || !model) {
        perror("sparsetouch: memory");
        return 2;
    }
    madvise(m, HUGE, MADV_HUGEPAGE);
    madvise(m + HUGE, SIZE - HUGE, MADV_NOHUGEPAGE);
    uint64_t written = 0, released = 0;
    struct timespec ms = {0, 1000000};
    for (uint64_t s = 1; s <= steps; s++) {
        uint64_t p = next() % 8 == 0 ? next() % (HUGE / PAGE)
                                     : HUGE / PAGE + (next() % 4000) * 256 + next() % 8;
        uint64_t what = next() % 100;
        if (what < 70) {
            uint32_t *w = (uint32_t *)(m + p * PAGE);
            uint32_t v = (uint32_t)s;
            w[0] = v;
            w[v % 1024] = v;
            /* The old second word, if elsewhere, keeps the old value:
             * clear it so that the page holds only this step's words. */
            if (model[p] && model[p] % 1024 != v % 1024 && model[p] % 1024 != 0)
                w[model[p] % 1024] = 0;
            model[p] = v;
            written++;
        } else if (what < 71) {
            uint64_t a = (p * PAGE) & ~(SPAN - 1);
            if (madvise(m + a, SPAN, MADV_DONTNEED)) {
                perror("sparsetouch: madvise");
                return 2;
            }
            memset(model + a / PAGE, 0, SPAN / PAGE * sizeof *model);
            released++;
        } else {
            check(m, model, p, "during the run");
        }
        if (s % 1000 == 0)
            nanosleep(&ms, 0);
    }
    uint64_t h = 1469598103934665603ULL, touched = 0;
    for (uint64_t p = 0; p < PAGES; p++) {
        check(m, model, p, "at the end");
        if (model[p]) {
            touched++;
            h = (h ^ (p * 2654435761ULL + model[p])) * 1099511628211ULL;
        }
    }
    printf("steps %" PRIu64 " written %" PRIu64 " released %" PRIu64 " pages holding data %" PRIu64
           " hash %016" PRIx64 "\n",
           steps, written, released, touched, h);
    return 0;
}
