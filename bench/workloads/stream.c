/*
 * stream.c - STREAM, one of the HPC Challenge kernels used in AMPoM's
 * evaluation (Ho, Wang, Lau: Lightweight Process Migration and Memory
 * Prefetching in openMosix): sequential, bandwidth-bound sweeps over three
 * large arrays.  The memory (--mib, default 64) is split into three double
 * arrays a, b, c.
 *
 * One iteration = one STREAM round, in STREAM's order:
 *   copy c = a;  scale b = s*c;  add c = a + b;  triad a = b + s*c.
 * The arrays start with seeded random values (so that every page differs).
 * With s = sqrt(2) - 1 a round multiplies every a[j] by s^2 + 2s = 1 (up to
 * rounding), so values stay bounded however long it runs.
 *
 * Verification (as STREAM does, per element instead of on averages): after
 * k rounds every element must equal its initial a0[j] times the factor
 * obtained by running the same k rounds on a scalar 1.0, within a relative
 * error of 16(k+1) epsilon.  The checksum hashes the arrays' bits.
 */
#include "common.h"
#include <float.h>

#define CHUNK 8192

static int check(double got, double want, double tol)
{
    double err = fabs(got - want);
    return err <= tol * fabs(want); /* false for NaN */
}

int main(int argc, char **argv)
{
    wl_t w;
    wl_parse(&w, "stream", argc, argv, NULL, NULL, "  (default --mib 64)\n");
    size_t bytes = w.bytes ? w.bytes : 64u << 20;
    size_t n = bytes / 3 / sizeof(double);
    if (n < CHUNK)
        n = CHUNK;
    double *mem = wl_alloc(&w, 3 * n * sizeof(double));
    double *a = mem, *b = mem + n, *c = mem + 2 * n;
    const double s = M_SQRT2 - 1.0;
    const uint64_t ka = wl_mix(w.seed + 31), kb = wl_mix(w.seed + 32), kc = wl_mix(w.seed + 33);

    for (size_t j = 0; j < n; j++) {
        a[j] = 1.0 + wl_u01(wl_rand_at(ka, j));
        b[j] = 2.0 + wl_u01(wl_rand_at(kb, j));
        c[j] = wl_u01(wl_rand_at(kc, j));
    }

    wl_ready(&w);
    while (wl_more(&w)) {
        for (size_t lo = 0; lo < n; lo += CHUNK) {          /* copy */
            size_t hi = lo + CHUNK < n ? lo + CHUNK : n;
            for (size_t j = lo; j < hi; j++)
                c[j] = a[j];
            wl_poll(&w);
        }
        for (size_t lo = 0; lo < n; lo += CHUNK) {          /* scale */
            size_t hi = lo + CHUNK < n ? lo + CHUNK : n;
            for (size_t j = lo; j < hi; j++)
                b[j] = s * c[j];
            wl_poll(&w);
        }
        for (size_t lo = 0; lo < n; lo += CHUNK) {          /* add */
            size_t hi = lo + CHUNK < n ? lo + CHUNK : n;
            for (size_t j = lo; j < hi; j++)
                c[j] = a[j] + b[j];
            wl_poll(&w);
        }
        for (size_t lo = 0; lo < n; lo += CHUNK) {          /* triad */
            size_t hi = lo + CHUNK < n ? lo + CHUNK : n;
            for (size_t j = lo; j < hi; j++)
                a[j] = b[j] + s * c[j];
            wl_poll(&w);
        }
        w.iter++;
    }
    wl_work_done(&w);

    wl_hash_t h;
    wl_hash_init(&h, w.seed);
    wl_hash_words(&h, (const uint64_t *)mem, 3 * n);
    wl_hash_u64(&h, w.iter);
    uint64_t checksum = wl_hash_final(&h);

    wl_maybe_inject(&w, mem, 3 * n * sizeof(double));

    /* the same rounds on a scalar 1.0 */
    double fa = 1.0, fb = 0, fc = 0;
    for (uint64_t r = 0; r < w.iter; r++) {
        fc = fa;
        fb = s * fc;
        fc = fa + fb;
        fa = fb + s * fc;
    }
    double tol = 16.0 * ((double)w.iter + 1.0) * DBL_EPSILON;
    size_t bad = 0, first = 0;
    char which = 0;
    for (size_t j = 0; j < n; j++) {
        double a0 = 1.0 + wl_u01(wl_rand_at(ka, j));
        int ok;
        if (w.iter == 0) {
            ok = a[j] == a0 && b[j] == 2.0 + wl_u01(wl_rand_at(kb, j)) &&
                 c[j] == wl_u01(wl_rand_at(kc, j));
        } else {
            ok = check(a[j], a0 * fa, tol) && check(b[j], a0 * fb, tol) &&
                 check(c[j], a0 * fc, tol);
        }
        if (!ok && !bad++) {
            first = j;
            which = !check(a[j], a0 * fa, tol) ? 'a' : !check(b[j], a0 * fb, tol) ? 'b' : 'c';
        }
    }
    char reason[160];
    const char *why = NULL;
    if (bad) {
        snprintf(reason, sizeof reason, "elements bad=%zu of %zu first=%c[%zu]",
                 bad, n, which ? which : '?', first);
        why = reason;
    }
    return wl_finish(&w, checksum, why);
}
