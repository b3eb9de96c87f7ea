/*
 * common.h - shared harness for the pmig benchmark workloads.
 *
 * Every workload is a small single-threaded C11 program with the same
 * command line and the same output protocol (see README.md):
 *
 *   READY pid=<pid> rss_kib=<n> t0_ns=<clock at t = 0>
 *   TICK t_ms=<n> iter=<n> max_pause_ms=<n> max_pause_us=<n>
 *   DONE iter=<n> elapsed_ms=<n> max_pause_ms=<n> checksum=<hex> verify=ok max_pause_us=<n>
 *   DONE ... verify=FAIL max_pause_us=<n> reason=<word> [details]
 *
 * The "pause" is measured by the program itself: the work loop reads the
 * clock after every small batch of work (tens of microseconds) and keeps the
 * longest gap between two consecutive reads.  A process that is stopped
 * (e.g. frozen for migration) sees that stop as one long gap.  Intentional
 * sleeps (rate-limited modes) are not counted: only the oversleep is.
 *
 * Header-only on purpose: each workload is one translation unit.
 */
#ifndef PMIG_WORKLOAD_COMMON_H
#define PMIG_WORKLOAD_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define WL_NS_PER_MS 1000000ull
#define WL_NS_PER_S 1000000000ull
#define WL_DEFAULT_SECONDS 10.0

/* ---------------------------------------------------------------------- */
/* Deterministic pseudo-random numbers                                     */
/* ---------------------------------------------------------------------- */

/* splitmix64 finaliser: a good 64-bit bijective mixer. */
static inline uint64_t wl_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Counter-based generator: the i-th value of stream `seed`. */
static inline uint64_t wl_rand_at(uint64_t seed, uint64_t i)
{
    return wl_mix(wl_mix(seed ^ 0x5851f42d4c957f2dull) + i * 0x9e3779b97f4a7c15ull);
}

/* Uniform double in [0, 1) from 53 random bits. */
static inline double wl_u01(uint64_t r)
{
    return (double)(r >> 11) * (1.0 / 9007199254740992.0);
}

/* Sequential generator (splitmix64). */
typedef struct {
    uint64_t s;
} wl_rng_t;

static inline void wl_rng_init(wl_rng_t *r, uint64_t seed, uint64_t stream)
{
    r->s = wl_mix(seed ^ wl_mix(stream + 0x632be59bd9b4e019ull));
}

static inline uint64_t wl_rng_next(wl_rng_t *r)
{
    r->s += 0x9e3779b97f4a7c15ull;
    return wl_mix(r->s);
}

/* Uniform integer in [0, n) (n > 0), multiply-shift, no division. */
static inline uint64_t wl_rng_below(wl_rng_t *r, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)wl_rng_next(r) * n) >> 64);
}

/* ---------------------------------------------------------------------- */
/* Hashing of memory (for the deterministic checksum)                      */
/* ---------------------------------------------------------------------- */

typedef struct {
    uint64_t h[4];
    uint64_t n;
} wl_hash_t;

static inline void wl_hash_init(wl_hash_t *h, uint64_t seed)
{
    h->h[0] = seed ^ 0x243f6a8885a308d3ull;
    h->h[1] = seed ^ 0x13198a2e03707344ull;
    h->h[2] = seed ^ 0xa4093822299f31d0ull;
    h->h[3] = seed ^ 0x082efa98ec4e6c89ull;
    h->n = 0;
}

static inline uint64_t wl_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

/* Hash `nwords` 64-bit words; 4 independent lanes keep it fast. */
static inline void wl_hash_words(wl_hash_t *h, const uint64_t *w, size_t nwords)
{
    const uint64_t P = 0x9e3779b97f4a7c15ull;
    uint64_t a = h->h[0], b = h->h[1], c = h->h[2], d = h->h[3];
    size_t i = 0;
    for (; i + 4 <= nwords; i += 4) {
        a = wl_rotl(a ^ w[i + 0], 29) * P;
        b = wl_rotl(b ^ w[i + 1], 29) * P;
        c = wl_rotl(c ^ w[i + 2], 29) * P;
        d = wl_rotl(d ^ w[i + 3], 29) * P;
    }
    for (; i < nwords; i++)
        a = wl_rotl(a ^ w[i], 29) * P;
    h->h[0] = a; h->h[1] = b; h->h[2] = c; h->h[3] = d;
    h->n += nwords;
}

static inline void wl_hash_u64(wl_hash_t *h, uint64_t v)
{
    wl_hash_words(h, &v, 1);
}

static inline uint64_t wl_hash_final(const wl_hash_t *h)
{
    uint64_t x = wl_mix(h->h[0]) ^ wl_rotl(wl_mix(h->h[1]), 17) ^
                 wl_rotl(wl_mix(h->h[2]), 31) ^ wl_rotl(wl_mix(h->h[3]), 47);
    return wl_mix(x ^ h->n);
}

/* Word-wise "position-aware" sum used to verify memory that is written at
 * random places: S = sum_i wl_cell(i, m[i]) (mod 2^64).  A write of v over
 * old at i changes S by wl_cell(i, v) - wl_cell(i, old), so S can be kept up
 * to date in O(1) per write and checked against the memory in O(n). */
static inline uint64_t wl_cell(uint64_t i, uint64_t v)
{
    return wl_mix(v ^ (i * 0xd6e8feb86659fd93ull));
}

static inline uint64_t wl_cell_sum(const uint64_t *m, size_t nwords)
{
    uint64_t s = 0;
    for (size_t i = 0; i < nwords; i++)
        s += wl_cell(i, m[i]);
    return s;
}

/* ---------------------------------------------------------------------- */
/* The harness state                                                       */
/* ---------------------------------------------------------------------- */

typedef struct wl {
    const char *name;
    const char *extra_usage;   /* workload-specific options, for --help */
    /* arguments */
    size_t bytes;              /* --mib / --kib; 0 = workload default */
    double seconds;            /* --seconds; < 0 = unset; 0 = until signal */
    long long iterations;      /* --iterations; < 0 = unset */
    long report_ms;            /* --report-ms; 0 = no TICK lines */
    uint64_t seed;             /* --seed */
    clockid_t clock;           /* --clock monotonic|realtime */
    int inject_fault;          /* --inject-fault: self-test of verification */
    uint64_t pause_log_ns;     /* --pause-log-ms: print a PAUSE line per longer gap */
    /* run state */
    uint64_t t0;               /* clock at READY */
    uint64_t now;              /* clock at the latest poll */
    uint64_t last;             /* clock at the previous poll */
    uint64_t next_report;
    uint64_t max_gap;          /* longest gap between polls, ns */
    uint64_t deadline;         /* 0 = none */
    uint64_t t_end;            /* clock when the work loop ended */
    uint64_t iter;             /* completed iterations */
} wl_t;

static volatile sig_atomic_t wl_stop_requested = 0;

static inline void wl_on_signal(int sig)
{
    (void)sig;
    wl_stop_requested = 1;
}

static inline uint64_t wl_clock(const wl_t *w)
{
    struct timespec ts;
    clock_gettime(w->clock, &ts);
    return (uint64_t)ts.tv_sec * WL_NS_PER_S + (uint64_t)ts.tv_nsec;
}

static inline void wl_die(const wl_t *w, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", w && w->name ? w->name : "workload");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(2);
}

/* Callback for workload-specific options.  `opt` is the option name
 * including the leading "--", `val` the next argument (or the text after
 * '=', or NULL if there is none).  Return 1 if the value was consumed, 0 if
 * the option is a flag (took no value), -1 if the option is unknown. */
typedef int (*wl_opt_fn)(void *ctx, const char *opt, const char *val);

static inline double wl_parse_double(const wl_t *w, const char *opt, const char *val)
{
    char *end;
    if (!val)
        wl_die(w, "%s needs a value", opt);
    errno = 0;
    double d = strtod(val, &end);
    if (errno || end == val || *end || !(d >= 0) || d > 1e15)
        wl_die(w, "bad value for %s: '%s'", opt, val);
    return d;
}

static inline unsigned long long wl_parse_u64(const wl_t *w, const char *opt, const char *val)
{
    char *end;
    if (!val)
        wl_die(w, "%s needs a value", opt);
    errno = 0;
    unsigned long long v = strtoull(val, &end, 0);
    if (errno || end == val || *end || val[0] == '-')
        wl_die(w, "bad value for %s: '%s'", opt, val);
    return v;
}

static inline void wl_usage(const wl_t *w, FILE *f)
{
    fprintf(f,
        "usage: %s [options]\n"
        "  --mib N          memory size in MiB (fractions allowed)\n"
        "  --kib N          memory size in KiB (alternative to --mib)\n"
        "  --seconds S      run for S seconds (0 = until SIGTERM/SIGINT; default %g)\n"
        "  --iterations K   run exactly K iterations (deterministic output)\n"
        "  --report-ms M    TICK period in ms (0 = none; default 100)\n"
        "  --seed X         PRNG seed (default 1)\n"
        "  --clock C        monotonic (default) or realtime, for t_ms and pauses\n"
        "  --pause-log-ms M print 'PAUSE t_ms=<gap start> gap_us=<n>' for every gap > M ms\n"
        "  --inject-fault   corrupt one word before verifying (self-test: must FAIL)\n"
        "%s",
        w->name, WL_DEFAULT_SECONDS, w->extra_usage ? w->extra_usage : "");
}

static inline void wl_parse(wl_t *w, const char *name, int argc, char **argv,
                     wl_opt_fn extra, void *ctx, const char *extra_usage)
{
    memset(w, 0, sizeof *w);
    w->name = name;
    w->extra_usage = extra_usage;
    w->seconds = -1;
    w->iterations = -1;
    w->report_ms = 100;
    w->seed = 1;
    w->clock = CLOCK_MONOTONIC;

    for (int i = 1; i < argc; i++) {
        char optbuf[64];
        const char *arg = argv[i];
        const char *val = NULL;
        int has_eq = 0;
        if (strncmp(arg, "--", 2) != 0)
            wl_die(w, "unexpected argument '%s' (try --help)", arg);
        const char *eq = strchr(arg, '=');
        if (eq) {
            size_t n = (size_t)(eq - arg);
            if (n >= sizeof optbuf)
                wl_die(w, "option too long: %s", arg);
            memcpy(optbuf, arg, n);
            optbuf[n] = 0;
            val = eq + 1;
            has_eq = 1;
        } else {
            snprintf(optbuf, sizeof optbuf, "%s", arg);
            val = i + 1 < argc ? argv[i + 1] : NULL;
        }
        const char *opt = optbuf;
        int used = 1; /* value consumed? */
        if (!strcmp(opt, "--help")) {
            wl_usage(w, stdout);
            exit(0);
        } else if (!strcmp(opt, "--mib")) {
            w->bytes = (size_t)(wl_parse_double(w, opt, val) * 1048576.0);
        } else if (!strcmp(opt, "--kib")) {
            w->bytes = (size_t)(wl_parse_double(w, opt, val) * 1024.0);
        } else if (!strcmp(opt, "--seconds")) {
            w->seconds = wl_parse_double(w, opt, val);
        } else if (!strcmp(opt, "--iterations")) {
            w->iterations = (long long)wl_parse_u64(w, opt, val);
        } else if (!strcmp(opt, "--report-ms")) {
            w->report_ms = (long)wl_parse_u64(w, opt, val);
        } else if (!strcmp(opt, "--seed")) {
            w->seed = wl_parse_u64(w, opt, val);
        } else if (!strcmp(opt, "--clock")) {
            if (val && !strcmp(val, "monotonic"))
                w->clock = CLOCK_MONOTONIC;
            else if (val && !strcmp(val, "realtime"))
                w->clock = CLOCK_REALTIME;
            else
                wl_die(w, "--clock must be monotonic or realtime");
        } else if (!strcmp(opt, "--pause-log-ms")) {
            w->pause_log_ns = (uint64_t)(wl_parse_double(w, opt, val) * 1e6);
        } else if (!strcmp(opt, "--inject-fault")) {
            w->inject_fault = 1;
            used = 0;
        } else {
            used = extra ? extra(ctx, opt, val) : -1;
            if (used < 0)
                wl_die(w, "unknown option '%s' (try --help)", opt);
        }
        if (has_eq && !used)
            wl_die(w, "option %s takes no value", opt);
        if (!has_eq && used)
            i++;
    }
    if (w->seconds < 0 && w->iterations < 0)
        w->seconds = WL_DEFAULT_SECONDS;

    /* Stdout: line-buffered on a static buffer (no heap for stdio). */
    static char outbuf[4096];
    setvbuf(stdout, outbuf, _IOLBF, sizeof outbuf);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = wl_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

/* ---------------------------------------------------------------------- */
/* Memory                                                                  */
/* ---------------------------------------------------------------------- */

static inline void *wl_alloc(const wl_t *w, size_t bytes)
{
    if (bytes == 0)
        bytes = 1;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        wl_die(w, "mmap of %zu bytes failed: %s", bytes, strerror(errno));
    return p;
}

static inline unsigned long long wl_rss_kib(void)
{
    /* open/read rather than stdio: no heap allocation */
    char buf[128];
    unsigned long long size = 0, res = 0;
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    if (sscanf(buf, "%llu %llu", &size, &res) != 2)
        return 0;
    return res * (unsigned long long)sysconf(_SC_PAGESIZE) / 1024;
}

/* Fill words with deterministic random data; returns their wl_cell_sum. */
static inline uint64_t wl_fill_random(uint64_t *m, size_t nwords, uint64_t seed, uint64_t stream)
{
    uint64_t s = 0, k = wl_mix(seed + stream);
    for (size_t i = 0; i < nwords; i++) {
        m[i] = wl_rand_at(k, i);
        s += wl_cell(i, m[i]);
    }
    return s;
}

/* --inject-fault: flip bit 62 of one word (turns a double in [-2,2] into
 * Inf/NaN or a huge number, and changes any integer). */
static inline void wl_maybe_inject(const wl_t *w, void *region, size_t bytes)
{
    if (!w->inject_fault || bytes < 8)
        return;
    size_t nwords = bytes / 8;
    size_t idx = nwords / 2 + (size_t)(w->seed % 7) % nwords;
    if (idx >= nwords)
        idx = nwords - 1;
    ((volatile uint64_t *)region)[idx] ^= 1ull << 62;
    fprintf(stderr, "%s: injected fault at word %zu of %zu\n", w->name, idx, nwords);
}

/* ---------------------------------------------------------------------- */
/* Run loop: READY, polling, TICK, DONE                                    */
/* ---------------------------------------------------------------------- */

static inline void wl_ready(wl_t *w)
{
    w->t0 = wl_clock(w);
    printf("READY pid=%ld rss_kib=%llu t0_ns=%llu\n", (long)getpid(), wl_rss_kib(),
           (unsigned long long)w->t0);
    fflush(stdout);
    w->last = w->now = wl_clock(w);
    w->max_gap = 0;
    w->iter = 0;
    w->next_report = w->report_ms ? w->t0 + (uint64_t)w->report_ms * WL_NS_PER_MS : UINT64_MAX;
    w->deadline = w->seconds > 0 ? w->t0 + (uint64_t)(w->seconds * 1e9) : 0;
}

static inline void wl_tick(wl_t *w)
{
    uint64_t t = w->now - w->t0;
    printf("TICK t_ms=%llu iter=%llu max_pause_ms=%llu max_pause_us=%llu\n",
           (unsigned long long)(t / WL_NS_PER_MS), (unsigned long long)w->iter,
           (unsigned long long)(w->max_gap / WL_NS_PER_MS),
           (unsigned long long)(w->max_gap / 1000));
    fflush(stdout);
    uint64_t period = (uint64_t)w->report_ms * WL_NS_PER_MS;
    /* Next report on the period grid; after a long stop, skip missed slots. */
    w->next_report += period;
    if (w->next_report <= w->now)
        w->next_report = w->now - (w->now - w->t0) % period + period;
}

static void wl_log_pause(const wl_t *w, uint64_t gap)
{
    printf("PAUSE t_ms=%llu gap_us=%llu\n",
           (unsigned long long)((w->last - w->t0) / WL_NS_PER_MS),
           (unsigned long long)(gap / 1000));
    fflush(stdout);
}

/* Read the clock, account the gap since the previous poll, TICK if due.
 * Call this after every small batch of work (<= ~100 us). */
static inline void wl_poll(wl_t *w)
{
    uint64_t now = wl_clock(w);
    if (now > w->last) {      /* a clock going backwards is ignored */
        uint64_t gap = now - w->last;
        if (gap > w->max_gap)
            w->max_gap = gap;
        if (w->pause_log_ns && gap > w->pause_log_ns)
            wl_log_pause(w, gap);
    }
    w->last = w->now = now;
    if (now >= w->next_report)
        wl_tick(w);
}

/* Should another iteration start?  Polls the clock as well. */
static inline int wl_more(wl_t *w)
{
    wl_poll(w);
    if (wl_stop_requested)
        return 0;
    if (w->iterations >= 0 && w->iter >= (uint64_t)w->iterations)
        return 0;
    if (w->deadline && w->now >= w->deadline)
        return 0;
    return 1;
}

/* Iterations still allowed by --iterations (UINT64_MAX if unlimited). */
static inline uint64_t wl_left(const wl_t *w)
{
    if (w->iterations < 0)
        return UINT64_MAX;
    return w->iter >= (uint64_t)w->iterations ? 0 : (uint64_t)w->iterations - w->iter;
}

/* Sleep until absolute time t (but wake for TICKs and signals).  The
 * requested sleep is not a pause; only oversleeping past t counts. */
static inline void wl_sleep_until(wl_t *w, uint64_t t)
{
    if (w->next_report < t)
        t = w->next_report;
    if (w->deadline && w->deadline < t)
        t = w->deadline;
    struct timespec ts = { (time_t)(t / WL_NS_PER_S), (long)(t % WL_NS_PER_S) };
    while (!wl_stop_requested) {
        int rc = clock_nanosleep(w->clock, TIMER_ABSTIME, &ts, NULL);
        if (rc != EINTR)
            break;
    }
    if (t > w->last)
        w->last = t;
    wl_poll(w);
}

/* Rate limiter for "P writes per second" modes. */
typedef struct {
    double rate;      /* per second; <= 0 = unlimited */
    uint64_t t0;      /* schedule origin (clock) */
    uint64_t n0;      /* count at the origin */
} wl_pacer_t;

static inline void wl_pacer_start(wl_pacer_t *p, const wl_t *w, double rate, uint64_t done)
{
    p->rate = rate;
    p->t0 = w->now;
    p->n0 = done;
}

/* How many writes may be done now (0 after sleeping until the next one is
 * due).  Writes are grouped on a 1 ms grid.  After a stop (or any lag of
 * more than 10 ms), the schedule restarts instead of bursting to catch up. */
static inline uint64_t wl_pace(wl_t *w, wl_pacer_t *p, uint64_t done)
{
    if (p->rate <= 0)
        return UINT64_MAX;
    uint64_t now = w->now;
    double el = (double)(now - p->t0) * 1e-9;
    uint64_t due = p->n0 + (uint64_t)(el * p->rate);
    if (due > done) {
        uint64_t behind = due - done;
        if ((double)behind > p->rate * 0.010 + 1.0) {
            p->t0 = now;
            p->n0 = done;
            return 1;
        }
        return behind;
    }
    /* time at which done+1 is due, rounded up to the 1 ms grid */
    double tn = (double)(done + 1 - p->n0) / p->rate * 1e9;
    uint64_t rel = (uint64_t)ceil(tn / 1e6) * WL_NS_PER_MS;
    wl_sleep_until(w, p->t0 + rel);
    return 0;
}

/* Call once when the work loop has ended (before checksum and verify). */
static inline void wl_work_done(wl_t *w)
{
    wl_poll(w);
    w->t_end = w->now;
}

/* Print DONE and return the exit status. `reason` NULL means verify=ok. */
static inline int wl_finish(wl_t *w, uint64_t checksum, const char *reason)
{
    uint64_t el = w->t_end - w->t0;
    printf("DONE iter=%llu elapsed_ms=%llu max_pause_ms=%llu checksum=%016llx ",
           (unsigned long long)w->iter, (unsigned long long)(el / WL_NS_PER_MS),
           (unsigned long long)(w->max_gap / WL_NS_PER_MS),
           (unsigned long long)checksum);
    if (!reason)
        printf("verify=ok max_pause_us=%llu\n", (unsigned long long)(w->max_gap / 1000));
    else
        printf("verify=FAIL max_pause_us=%llu reason=%s\n",
               (unsigned long long)(w->max_gap / 1000), reason);
    fflush(stdout);
    return reason ? 1 : 0;
}

#endif /* PMIG_WORKLOAD_COMMON_H */
