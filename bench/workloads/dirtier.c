/*
 * dirtier.c - the peers' workload (peers.md): fill N MiB (default 64) with
 * random data, then dirty P random pages per second (default 1000), log
 * every 100 ms and record the longest pause, which is the down time as the
 * program itself sees it.
 *
 * One iteration = one page dirtied: a random 64-bit value written at a
 * random word of a random page.  Writes are grouped on a 1 ms grid (so
 * 1000 pages/s = one page per ms, 50000 pages/s = 50 pages per ms); time
 * spent in these intended sleeps is not counted as a pause, oversleeping
 * is.  After a stop the schedule restarts rather than bursting to catch up.
 * With --hot-mib H only the first H MiB are rewritten (a 1 GiB process that
 * keeps rewriting 16 MiB: --mib 1024 --hot-mib 16).
 * Verification: the same position-aware memory sum as rma.c.
 */
#include "common.h"

#define PAGE 4096u

struct opts {
    double dirty_rate;
    double hot_mib;
};

static int extra(void *ctx, const char *opt, const char *val)
{
    struct opts *o = ctx;
    if (!strcmp(opt, "--dirty-rate")) {
        o->dirty_rate = wl_parse_double(NULL, opt, val);
        return 1;
    }
    if (!strcmp(opt, "--hot-mib")) {
        o->hot_mib = wl_parse_double(NULL, opt, val);
        return 1;
    }
    return -1;
}

int main(int argc, char **argv)
{
    wl_t w;
    struct opts o = { 1000.0, 0.0 };
    wl_parse(&w, "dirtier", argc, argv, extra, &o,
             "  --dirty-rate P   pages dirtied per second (default 1000; 0 = unlimited)\n"
             "  --hot-mib H      rewrite only the first H MiB (default 0: all of it)\n"
             "  (default --mib 64)\n");
    size_t bytes = w.bytes ? w.bytes : 64u << 20;
    size_t npages = bytes / PAGE;
    if (npages < 1)
        npages = 1;
    bytes = npages * PAGE;
    size_t nwords = bytes / 8;
    /* Pages the writes go to: the first `hot` pages. */
    size_t hot = npages;
    if (o.hot_mib > 0) {
        double h = o.hot_mib * (1u << 20) / PAGE;
        if (h < 1)
            h = 1;
        if (h < (double)npages)
            hot = (size_t)h;
    }

    uint64_t *m = wl_alloc(&w, bytes);
    uint64_t sum = wl_fill_random(m, nwords, w.seed, 11);
    wl_rng_t rng;
    wl_rng_init(&rng, w.seed, 12);

    wl_ready(&w);
    wl_pacer_t pacer;
    wl_pacer_start(&pacer, &w, o.dirty_rate, 0);
    while (wl_more(&w)) {
        uint64_t n = wl_pace(&w, &pacer, w.iter);
        uint64_t left = wl_left(&w);
        if (n > 64)
            n = 64;
        if (n > left)
            n = left;
        for (uint64_t k = 0; k < n; k++) {
            uint64_t r = wl_rng_next(&rng);
            uint64_t page = (uint64_t)(((unsigned __int128)r * hot) >> 64);
            uint64_t i = page * (PAGE / 8) + (r & (PAGE / 8 - 1));
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
