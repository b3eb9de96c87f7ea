/*
 * getpid.c - Noack's "getpid() process" (Comparative Evaluation of Process
 * Migration Algorithms, ch. 5): a loop that enters the kernel with getpid()
 * as fast as it can.  Its address space is tiny and barely written, so a
 * migration of it measures the fixed costs of an algorithm.
 *
 * One iteration = one getpid system call (syscall(SYS_getpid), never a
 * cached value).  Verification: every call returned the pid the process had
 * at start (a migration must keep the pid), unless --allow-pid-change.
 * The checksum folds the seed and the call count: it is deterministic.
 */
#include "common.h"
#include <sys/syscall.h>

struct opts {
    int allow_pid_change;
};

static int extra(void *ctx, const char *opt, const char *val)
{
    struct opts *o = ctx;
    (void)val;
    if (!strcmp(opt, "--allow-pid-change")) {
        o->allow_pid_change = 1;
        return 0;
    }
    return -1;
}

int main(int argc, char **argv)
{
    wl_t w;
    struct opts o = { 0 };
    wl_parse(&w, "getpid", argc, argv, extra, &o,
             "  --allow-pid-change  a different pid after migration is not a failure\n"
             "  (--mib/--kib are accepted and ignored: this process allocates nothing)\n");

    static volatile long expected; /* in .bss: the only data it keeps */
    expected = (long)syscall(SYS_getpid);
    long first_bad = 0;
    uint64_t changes = 0;

    wl_ready(&w);
    while (wl_more(&w)) {
        uint64_t n = wl_left(&w);
        if (n > 64)
            n = 64;
        for (uint64_t k = 0; k < n; k++) {
            long p = (long)syscall(SYS_getpid);
            if (p != expected) {
                if (!changes++)
                    first_bad = p;
                expected = p;
            }
        }
        w.iter += n;
    }
    wl_work_done(&w);

    wl_hash_t h;
    wl_hash_init(&h, w.seed);
    wl_hash_u64(&h, w.iter);
    uint64_t checksum = wl_hash_final(&h);

    if (w.inject_fault) {
        expected ^= 1; /* pretend the last call returned another pid */
        changes++;
        fprintf(stderr, "getpid: injected fault (pid change)\n");
    }
    char reason[128];
    const char *why = NULL;
    if (changes && !o.allow_pid_change) {
        snprintf(reason, sizeof reason, "pid_changed count=%llu first_new_pid=%ld",
                 (unsigned long long)changes, first_bad);
        why = reason;
    }
    return wl_finish(&w, checksum, why);
}
