/*
 * dgemm_core.h - blocked double-precision matrix multiply C = A * B shared
 * by dgemm.c and dgemm_sparse.c.
 *
 * Matrices are n x n, row-major, n a multiple of the tile size DG_BS.
 * One iteration computes one DG_BS x DG_BS tile of C from scratch
 * (C_IJ = sum_K A_IK B_KJ), tiles in row-major order, wrapping around to the
 * first tile after the last one.  Recomputing a tile gives bit-identical
 * values, so after any number of iterations the state is well defined:
 * the first min(iter, T*T) tiles hold A*B, the rest still hold their seeded
 * initial values.
 *
 * Verification is Freivalds' check on the computed part: for a seeded
 * random vector x, C x must equal A (B x) row by row, within a rounding
 * bound of 4 n eps sum_k |A_ik| (|B| |x|)_k; tiles not computed yet must
 * still hold their initial values.  Cost O(n^2) instead of O(n^3).
 */
#ifndef PMIG_DGEMM_CORE_H
#define PMIG_DGEMM_CORE_H

#include "common.h"
#include <float.h>

#define DG_BS 64

typedef struct {
    size_t n, T;
    double *A, *B, *C;
    uint64_t kA, kB, kC, kx;
} dg_t;

static inline double dg_val(uint64_t key, size_t idx)
{
    return 2.0 * wl_u01(wl_rand_at(key, idx)) - 1.0; /* [-1, 1) */
}

/* Largest n (multiple of DG_BS, at least DG_BS) with 3 n^2 doubles <= bytes. */
static inline size_t dg_order(size_t bytes)
{
    size_t n = (size_t)sqrt((double)bytes / (3.0 * sizeof(double)));
    n -= n % DG_BS;
    return n < DG_BS ? DG_BS : n;
}

static inline void dg_init(dg_t *d, double *mem, size_t n, uint64_t seed)
{
    d->n = n;
    d->T = n / DG_BS;
    d->A = mem;
    d->B = mem + n * n;
    d->C = mem + 2 * n * n;
    d->kA = wl_mix(seed + 41);
    d->kB = wl_mix(seed + 42);
    d->kC = wl_mix(seed + 43);
    d->kx = wl_mix(seed + 44);
    for (size_t i = 0; i < n * n; i++) {
        d->A[i] = dg_val(d->kA, i);
        d->B[i] = dg_val(d->kB, i);
        d->C[i] = dg_val(d->kC, i);
    }
}

/* Compute tile number t (mod T*T); polls the clock every 16 rows of a K block. */
static inline void dg_tile(wl_t *w, dg_t *d, uint64_t t)
{
    const size_t n = d->n;
    t %= (uint64_t)d->T * d->T;
    const size_t I = (size_t)(t / d->T), J = (size_t)(t % d->T);
    const size_t i0 = I * DG_BS, j0 = J * DG_BS;
    for (size_t i = i0; i < i0 + DG_BS; i++)
        memset(d->C + i * n + j0, 0, DG_BS * sizeof(double));
    for (size_t k0 = 0; k0 < n; k0 += DG_BS) {
        for (size_t i = i0; i < i0 + DG_BS; i++) {
            double *restrict c = d->C + i * n + j0;
            const double *restrict a = d->A + i * n;
            for (size_t k = k0; k < k0 + DG_BS; k++) {
                const double aik = a[k];
                const double *restrict b = d->B + k * n + j0;
                for (size_t j = 0; j < DG_BS; j++)
                    c[j] += aik * b[j];
            }
            if (((i + 1) & 15) == 0)
                wl_poll(w);   /* every 16 x 64 x 64 multiply-adds */
        }
    }
}

/* Returns NULL if C is consistent with A, B after `iters` iterations. */
static inline const char *dg_verify(dg_t *d, uint64_t iters, char *reason, size_t len)
{
    const size_t n = d->n, T = d->T;
    const uint64_t tiles = (uint64_t)T * T;
    const uint64_t q = iters < tiles ? iters : tiles;  /* tiles computed */
    const size_t full = (size_t)(q / T);                /* full tile rows */
    const size_t part = (size_t)(q % T);                /* tiles in row `full` */
    double *x = calloc(5 * n, sizeof(double));
    if (!x) {
        snprintf(reason, len, "out_of_memory");
        return reason;
    }
    double *xp = x + n, *u = x + 2 * n, *up = x + 3 * n, *wabs = x + 4 * n;
    for (size_t j = 0; j < n; j++) {
        x[j] = dg_val(d->kx, j);
        xp[j] = j < part * DG_BS ? x[j] : 0.0;
    }
    /* u = B x, up = B xp, wabs = |B| |x| in one pass over B */
    for (size_t k = 0; k < n; k++) {
        const double *b = d->B + k * n;
        double s = 0, sp = 0, sa = 0;
        for (size_t j = 0; j < n; j++) {
            s += b[j] * x[j];
            sp += b[j] * xp[j];
            sa += fabs(b[j]) * fabs(x[j]);
        }
        u[k] = s; up[k] = sp; wabs[k] = sa;
    }
    size_t bad = 0, first = 0;
    const size_t rows_checked = (full + (part ? 1 : 0)) * DG_BS;
    for (size_t i = 0; i < rows_checked && i < n; i++) {
        const int partial = i >= full * DG_BS;
        const double *xv = partial ? xp : x, *uv = partial ? up : u;
        const double *a = d->A + i * n, *c = d->C + i * n;
        double y = 0, z = 0, bound = 0;
        for (size_t j = 0; j < n; j++)
            y += c[j] * xv[j];
        for (size_t k = 0; k < n; k++) {
            z += a[k] * uv[k];
            bound += fabs(a[k]) * wabs[k];
        }
        double tol = 4.0 * (double)n * DBL_EPSILON * bound + 1e-300;
        if (!(fabs(y - z) <= tol) && !bad++)
            first = i;
    }
    /* tiles never computed must hold their initial values */
    size_t untouched_bad = 0;
    for (size_t i = full * DG_BS; i < n; i++) {
        size_t jstart = (i < (full + 1) * DG_BS) ? part * DG_BS : 0;
        for (size_t j = jstart; j < n; j++)
            if (d->C[i * n + j] != dg_val(d->kC, i * n + j))
                untouched_bad++;
    }
    free(x);
    if (bad) {
        snprintf(reason, len, "freivalds rows_bad=%zu first_row=%zu", bad, first);
        return reason;
    }
    if (untouched_bad) {
        snprintf(reason, len, "uncomputed_tiles_changed elements=%zu", untouched_bad);
        return reason;
    }
    return NULL;
}

#endif /* PMIG_DGEMM_CORE_H */
