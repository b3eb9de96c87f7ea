/*
 * dgemm_sparse.c - the modified DGEMM of AMPoM's last experiment (Ho, Wang,
 * Lau: "allocates 575MB of memory, but works on matrices of 115MB ...
 * 575MB"): a process with a large address space and a small working set,
 * the case where demand paging / post-copy should beat copying everything.
 *
 * --mib (default 575) is allocated and filled with seeded random data;
 * the matrices of a DGEMM (dgemm_core.h) occupy only the first --work-mib
 * of it (default: a fifth of --mib, AMPoM's smallest case 115/575), the rest
 * (the "cold" area) is never touched again.  --cold-untouched leaves the
 * cold area unwritten instead (it then takes no memory at all).
 * Verification: Freivalds' check on C plus the cold area's position-aware
 * sum, which must not have changed.
 */
#include "dgemm_core.h"

struct opts {
    double work_mib;
    int cold_untouched;
};

static int extra(void *ctx, const char *opt, const char *val)
{
    struct opts *o = ctx;
    if (!strcmp(opt, "--work-mib")) {
        o->work_mib = wl_parse_double(NULL, opt, val);
        return 1;
    }
    if (!strcmp(opt, "--cold-untouched")) {
        o->cold_untouched = 1;
        return 0;
    }
    return -1;
}

int main(int argc, char **argv)
{
    wl_t w;
    struct opts o = { 0, 0 };
    wl_parse(&w, "dgemm_sparse", argc, argv, extra, &o,
             "  --work-mib N      size of the matrices (default: --mib / 5)\n"
             "  --cold-untouched  do not fill the rest of the area\n"
             "  (default --mib 575; one iteration = one 64x64 tile of C)\n");
    size_t total = w.bytes ? w.bytes : (size_t)575 << 20;
    size_t work = o.work_mib > 0 ? (size_t)(o.work_mib * 1048576.0) : total / 5;
    size_t n = dg_order(work);
    size_t mat_bytes = 3 * n * n * sizeof(double);
    if (total < mat_bytes)
        total = mat_bytes;
    total = (total + 4095) & ~(size_t)4095;

    double *mem = wl_alloc(&w, total);
    dg_t d;
    dg_init(&d, mem, n, w.seed);
    uint64_t *cold = (uint64_t *)(mem + 3 * n * n);
    size_t cold_words = (total - mat_bytes) / 8;
    uint64_t cold_sum = 0;
    if (!o.cold_untouched)
        cold_sum = wl_fill_random(cold, cold_words, w.seed, 51);
    else
        cold_sum = 0; /* untouched memory reads as zero */

    wl_ready(&w);
    while (wl_more(&w)) {
        dg_tile(&w, &d, w.iter);
        w.iter++;
    }
    wl_work_done(&w);

    wl_hash_t h;
    wl_hash_init(&h, w.seed);
    wl_hash_words(&h, (const uint64_t *)d.C, n * n);
    wl_hash_u64(&h, n);
    wl_hash_u64(&h, total);
    wl_hash_u64(&h, w.iter);
    uint64_t checksum = wl_hash_final(&h);

    wl_maybe_inject(&w, mem, total);
    char reason[200];
    const char *why = dg_verify(&d, w.iter, reason, sizeof reason);
    if (!why) {
        uint64_t got;
        if (o.cold_untouched) {
            got = 0;
            for (size_t i = 0; i < cold_words; i++)
                got |= cold[i];
        } else {
            got = wl_cell_sum(cold, cold_words);
        }
        if (got != cold_sum) {
            snprintf(reason, sizeof reason, "cold_area_changed");
            why = reason;
        }
    }
    return wl_finish(&w, checksum, why);
}
