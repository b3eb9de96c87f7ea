/*
 * fft.c - FFT, one of the HPC Challenge kernels used in AMPoM's evaluation
 * (Ho, Wang, Lau): a large one-dimensional complex FFT, with strided,
 * changing access patterns over the whole array.
 *
 * An iterative radix-2 FFT (bit-reversal permutation, then log2 N
 * butterfly stages) on N complex doubles; N is the largest power of two
 * whose data (16 N bytes) fit in --mib (default 64), so a power-of-two size
 * is used in full.  Twiddle factors come from two small tables of about
 * sqrt(N) entries each (w(k) = hi[k / L] * lo[k % L], accurate to a few
 * ulps), which take no significant memory.  The data start as seeded random
 * values in [-1, 1).  One iteration = one transform: forward on even
 * iterations, inverse (scaled by 1/N, exact) on odd ones, so every two
 * iterations are a round trip back to the start.
 *
 * Verification: after an odd count, one more (untimed) inverse transform;
 * then every value must equal its initial value within
 * 16 eps log2(N) (round trips + 1), and the twiddle tables must be
 * unchanged.  The checksum hashes the data's bits at the end of the work.
 */
#include "common.h"
#include <float.h>

#define FFT_POLL 4096

typedef struct {
    size_t n;      /* complex points */
    int logn;
    double *x;     /* 2n doubles, interleaved re, im */
    int logl;      /* L = 2^logl */
    size_t nlo, nhi;
    double *lo;    /* L complex: exp(-2 pi i k / n), k < L */
    double *hi;    /* n/2/L complex: exp(-2 pi i k L / n) */
    uint64_t key;
} fft_t;

static void fft_tables(const fft_t *f, double *lo, double *hi)
{
    for (size_t k = 0; k < f->nlo; k++) {
        double a = -2.0 * M_PI * (double)k / (double)f->n;
        lo[2 * k] = cos(a);
        lo[2 * k + 1] = sin(a);
    }
    for (size_t k = 0; k < f->nhi; k++) {
        double a = -2.0 * M_PI * (double)(k << f->logl) / (double)f->n;
        hi[2 * k] = cos(a);
        hi[2 * k + 1] = sin(a);
    }
}

/* One transform: forward, or inverse (then scaled by 1/n).
 * w == NULL: no clock polling (used by the untimed verification). */
static void fft_run(fft_t *f, int inverse, wl_t *w)
{
    const size_t n = f->n;
    double *x = f->x;
    const double *lo = f->lo, *hi = f->hi;
    const size_t lmask = f->nlo - 1;
    const int logl = f->logl;
    unsigned cnt = 0;

    /* bit-reversal permutation */
    for (size_t i = 0, j = 0; i < n; i++) {
        if (i < j) {
            double r = x[2 * i], im = x[2 * i + 1];
            x[2 * i] = x[2 * j];
            x[2 * i + 1] = x[2 * j + 1];
            x[2 * j] = r;
            x[2 * j + 1] = im;
        }
        size_t bit = n >> 1;
        while (j & bit) {
            j ^= bit;
            bit >>= 1;
        }
        j |= bit;
        if (w && ++cnt == FFT_POLL) {
            cnt = 0;
            wl_poll(w);
        }
    }

    const double si = inverse ? -1.0 : 1.0;
    for (size_t len = 2; len <= n; len <<= 1) {
        const size_t half = len >> 1, step = n / len;
        for (size_t i = 0; i < n; i += len) {
            for (size_t j0 = 0; j0 < half; j0 += FFT_POLL) {
                const size_t j1 = j0 + FFT_POLL < half ? j0 + FFT_POLL : half;
                for (size_t j = j0; j < j1; j++) {
                    const size_t k = j * step;
                    const double *h = hi + 2 * (k >> logl), *l = lo + 2 * (k & lmask);
                    const double wr = h[0] * l[0] - h[1] * l[1];
                    const double wi = si * (h[0] * l[1] + h[1] * l[0]);
                    double *p = x + 2 * (i + j), *q = x + 2 * (i + j + half);
                    const double vr = q[0] * wr - q[1] * wi;
                    const double vi = q[0] * wi + q[1] * wr;
                    const double ur = p[0], ui = p[1];
                    p[0] = ur + vr;
                    p[1] = ui + vi;
                    q[0] = ur - vr;
                    q[1] = ui - vi;
                }
                cnt += (unsigned)(j1 - j0);
                if (w && cnt >= FFT_POLL) {
                    cnt = 0;
                    wl_poll(w);
                }
            }
        }
    }
    if (inverse) {
        const double scale = 1.0 / (double)n; /* power of two: exact */
        for (size_t i = 0; i < 2 * n; i++) {
            x[i] *= scale;
            if (w && (i & (2 * FFT_POLL - 1)) == 0)
                wl_poll(w);
        }
    }
}

int main(int argc, char **argv)
{
    wl_t w;
    wl_parse(&w, "fft", argc, argv, NULL, NULL,
             "  (default --mib 64; N = largest power of two with 16 N bytes <= size;\n"
             "   one iteration = one transform, forward and inverse alternately)\n");
    size_t bytes = w.bytes ? w.bytes : 64u << 20;
    fft_t f;
    f.n = 1024;
    f.logn = 10;
    while (f.n * 2 * 16 <= bytes) {
        f.n *= 2;
        f.logn++;
    }
    f.logl = f.logn / 2;
    f.nlo = (size_t)1 << f.logl;
    f.nhi = (f.n / 2) >> f.logl;
    double *mem = wl_alloc(&w, f.n * 16 + (f.nlo + f.nhi) * 16);
    f.x = mem;
    f.lo = mem + 2 * f.n;
    f.hi = f.lo + 2 * f.nlo;
    f.key = wl_mix(w.seed + 71);
    fft_tables(&f, f.lo, f.hi);
    for (size_t i = 0; i < 2 * f.n; i++)
        f.x[i] = 2.0 * wl_u01(wl_rand_at(f.key, i)) - 1.0;

    wl_ready(&w);
    while (wl_more(&w)) {
        fft_run(&f, (int)(w.iter & 1), &w);
        w.iter++;
    }
    wl_work_done(&w);

    wl_hash_t h;
    wl_hash_init(&h, w.seed);
    wl_hash_words(&h, (const uint64_t *)f.x, 2 * f.n);
    wl_hash_u64(&h, f.n);
    wl_hash_u64(&h, w.iter);
    uint64_t checksum = wl_hash_final(&h);

    wl_maybe_inject(&w, f.x, 2 * f.n * sizeof(double));
    if (w.iter & 1)
        fft_run(&f, 1, NULL);
    double trips = (double)((w.iter + 1) / 2);
    double tol = 16.0 * DBL_EPSILON * f.logn * (trips + 1.0);
    double maxerr = 0;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < 2 * f.n; i++) {
        double want = 2.0 * wl_u01(wl_rand_at(f.key, i)) - 1.0;
        double err = fabs(f.x[i] - want);
        if (!(err <= tol)) {
            if (!bad++)
                first = i / 2;
        } else if (err > maxerr) {
            maxerr = err;
        }
    }
    /* the twiddle tables must be intact too */
    size_t twbad = 0;
    double *tlo = malloc((f.nlo + f.nhi) * 16);
    if (!tlo)
        wl_die(&w, "out of memory");
    fft_tables(&f, tlo, tlo + 2 * f.nlo);
    for (size_t i = 0; i < 2 * (f.nlo + f.nhi); i++)
        if (tlo[i] != f.lo[i])
            twbad++;
    free(tlo);
    if (getenv("FFT_DEBUG"))
        fprintf(stderr, "fft: n=%zu max_roundtrip_err=%.3g tol=%.3g\n", f.n, maxerr, tol);
    char reason[160];
    const char *why = NULL;
    if (bad) {
        snprintf(reason, sizeof reason, "roundtrip_error points_bad=%zu first=%zu tol=%.3g",
                 bad, first, tol);
        why = reason;
    } else if (twbad) {
        snprintf(reason, sizeof reason, "twiddles_changed count=%zu", twbad);
        why = reason;
    }
    return wl_finish(&w, checksum, why);
}
