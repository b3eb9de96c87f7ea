/*
 * dgemm.c - DGEMM, one of the HPC Challenge kernels used in AMPoM's
 * evaluation (Ho, Wang, Lau): a blocked dense matrix multiply C = A * B
 * whose three n x n double matrices fill --mib (default 64).  Compute-bound
 * with good spatial locality.  See dgemm_core.h for the iteration unit (one
 * 64 x 64 tile of C) and the verification (Freivalds' check).
 */
#include "dgemm_core.h"

int main(int argc, char **argv)
{
    wl_t w;
    wl_parse(&w, "dgemm", argc, argv, NULL, NULL,
             "  (default --mib 64; n = largest multiple of 64 with 3 n^2 doubles <= size;\n"
             "   one iteration = one 64x64 tile of C)\n");
    size_t bytes = w.bytes ? w.bytes : 64u << 20;
    size_t n = dg_order(bytes);
    double *mem = wl_alloc(&w, 3 * n * n * sizeof(double));
    dg_t d;
    dg_init(&d, mem, n, w.seed);

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
    wl_hash_u64(&h, w.iter);
    uint64_t checksum = wl_hash_final(&h);

    wl_maybe_inject(&w, d.C, n * n * sizeof(double));
    char reason[160];
    return wl_finish(&w, checksum, dg_verify(&d, w.iter, reason, sizeof reason));
}
