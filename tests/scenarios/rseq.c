/* rseq: glibc registers an rseq area for every thread; it must be registered
 * again after a restore (same address, length and signature).
 * Per thread (main and a second one blocked in a futex wait):
 *   - rseq(area, len, 0, RSEQ_SIG) must fail with EBUSY (= already registered
 *     with exactly these parameters; 0 would mean it was not registered);
 *   - after cpu_id is overwritten with -1, delivering a signal must make the
 *     kernel write the real CPU back;
 *   - sched_getcpu() (which reads the rseq area in glibc) agrees with getcpu(). */
#include "common.h"
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/rseq.h>

static unsigned reg_len;
static int gen, acks;
static char thr_bad[300];
static void on_usr1(int s) { (void)s; }

static struct rseq *area(void) { return (struct rseq *)((char *)__builtin_thread_pointer() + __rseq_offset); }

static int rseq_ok(const char *who, char *why, size_t cap) {
    struct rseq *rs = area();
    long r = syscall(SYS_rseq, rs, reg_len, 0, RSEQ_SIG);
    if (r == 0) return snprintf(why, cap, "%s: rseq was not registered (registering it again succeeded)", who), 0;
    if (errno != EBUSY) return snprintf(why, cap, "%s: rseq registered with other parameters (errno %d)", who, errno), 0;
    __atomic_store_n(&rs->cpu_id, (uint32_t)-1, __ATOMIC_RELAXED);
    __atomic_store_n(&rs->cpu_id_start, (uint32_t)-1, __ATOMIC_RELAXED);
    syscall(SYS_tgkill, getpid(), scn_gettid(), SIGUSR1);   /* handler runs before tgkill returns */
    int32_t c = (int32_t)__atomic_load_n(&rs->cpu_id, __ATOMIC_RELAXED);
    if (c < 0) return snprintf(why, cap, "%s: kernel did not update rseq cpu_id on signal delivery (still %d)", who, c), 0;
    for (int tries = 0;; tries++) {      /* we may migrate between the two reads: retry a bit */
        unsigned cpu = 0;
        int g = sched_getcpu();
        syscall(SYS_getcpu, &cpu, NULL, NULL);
        if (g >= 0 && (unsigned)g == cpu) break;
        if (tries == 1000) return snprintf(why, cap, "%s: sched_getcpu() %d vs getcpu %u", who, g, cpu), 0;
    }
    return 1;
}

static void *thr(void *arg) {
    (void)arg;
    scn_bump_and_wake(&acks);
    for (int seen = 0;; seen++) {
        while (__atomic_load_n(&gen, __ATOMIC_ACQUIRE) == seen) scn_futex(&gen, FUTEX_WAIT_PRIVATE, seen, NULL);
        thr_bad[0] = 0;
        rseq_ok("thread", thr_bad, sizeof thr_bad);
        scn_bump_and_wake(&acks);
    }
    return NULL;
}

static int check(void) {
    CHECK(__rseq_size > 0, "glibc did not register rseq");
    if (!rseq_ok("main", scn_reason, sizeof scn_reason)) return 0;
    int target = acks + 1;
    scn_bump_and_wake(&gen);
    CHECK(scn_wait_at_least(&acks, target, 20.0), "thread did not wake within 20s");
    CHECK(!thr_bad[0], "%s", thr_bad);
    return 1;
}

int main(void) {
    scn_name = "rseq";
    if (__rseq_size == 0) scn_die("glibc did not register rseq (__rseq_size 0)");
    signal(SIGUSR1, on_usr1);
    /* find the length glibc registered with: the one that gives EBUSY */
    unsigned lens[] = {__rseq_size, 32, 20};
    for (int i = 0; i < 3 && !reg_len; i++)
        if (syscall(SYS_rseq, area(), lens[i], 0, RSEQ_SIG) < 0 && errno == EBUSY) reg_len = lens[i];
    if (!reg_len) scn_die("cannot tell the registered rseq length");
    pthread_t t;
    if (pthread_create(&t, NULL, thr, NULL)) scn_die("pthread_create");
    if (!scn_wait_at_least(&acks, 1, 20.0)) scn_die("thread start");
    scn_run(check, NULL);
}
