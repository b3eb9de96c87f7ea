/*
 * rma.c - Noack's "RMA" process (Comparative Evaluation of Process
 * Migration Algorithms, ch. 5): random writes to N MiB (default 4) as fast
 * as possible, the worst case for every algorithm that copies dirty pages.
 *
 * With --dirty-rate P the writes are paced to P per second (each write hits
 * a random page, so this dirties about P pages/s), like the peers' workload
 * in peers.md.
 *
 * The area is first filled with seeded random data.  One iteration = one
 * write of a random 64-bit value at a random word.  The program keeps
 * S = sum_i cell(i, m[i]) up to date on every write; verification
 * recomputes S from memory, which catches any word that differs from what
 * the program wrote (lost, stale or swapped pages).
 */
#include "common.h"

struct opts {
    double dirty_rate;
};

static int extra(void *ctx, const char *opt, const char *val)
{
    struct opts *o = ctx;
    if (!strcmp(opt, "--dirty-rate")) {
        o->dirty_rate = wl_parse_double(NULL, opt, val);
        return 1;
    }
    return -1;
}

int main(int argc, char **argv)
{
    wl_t w;
    struct opts o = { 0 };
    wl_parse(&w, "rma", argc, argv, extra, &o,
             "  --dirty-rate P   at most P writes (pages dirtied) per second; 0 = unlimited\n"
             "  (default --mib 4)\n");
    size_t bytes = w.bytes ? w.bytes : 4u << 20;
    size_t nwords = bytes / 8;
    if (nwords < 512)
        nwords = 512;
    bytes = nwords * 8;

    uint64_t *m = wl_alloc(&w, bytes);
    uint64_t sum = wl_fill_random(m, nwords, w.seed, 1);
    wl_rng_t rng;
    wl_rng_init(&rng, w.seed, 2);

    wl_ready(&w);
    wl_pacer_t pacer;
    wl_pacer_start(&pacer, &w, o.dirty_rate, 0);
    while (wl_more(&w)) {
        uint64_t n = wl_pace(&w, &pacer, w.iter);
        uint64_t left = wl_left(&w);
        if (n > 256)
            n = 256;
        if (n > left)
            n = left;
        for (uint64_t k = 0; k < n; k++) {
            uint64_t i = wl_rng_below(&rng, nwords);
            uint64_t v = wl_rng_next(&rng);
            sum += wl_cell(i, v) - wl_cell(i, m[i]);
            m[i] = v;
        }
        w.iter += n;
    }
    wl_work_done(&w);

    wl_hash_t h;
    wl_hash_init(&h, w.seed);
    wl_hash_words(&h, m, nwords);
    wl_hash_u64(&h, w.iter);
    uint64_t checksum = wl_hash_final(&h);

    wl_maybe_inject(&w, m, bytes);
    uint64_t got = wl_cell_sum(m, nwords);
    char reason[128];
    const char *why = NULL;
    if (got != sum) {
        snprintf(reason, sizeof reason, "memory_sum expected=%016llx got=%016llx",
                 (unsigned long long)sum, (unsigned long long)got);
        why = reason;
    }
    return wl_finish(&w, checksum, why);
}
