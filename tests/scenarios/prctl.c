/* prctl: process attributes only prctl sets, checked on every check:
 *   child subreaper on;
 *   transparent huge pages disabled (except where advised, if this kernel
 *     has that flag);
 *   machine-check kill policy "early";
 *   rdtsc raises SIGSEGV (PR_TSC_SIGSEGV; the program makes no clock call
 *     after setting it: the vDSO's clock_gettime would use rdtsc);
 *   KSM merging of the whole process, when this kernel and these
 *     privileges allow it (then it must stay on).
 * A second thread, created after they are set, inherits the per-thread ones
 * (machine-check policy, TSC mode) and reports them when asked. */
#include "common.h"
#include <pthread.h>
#include <sys/prctl.h>

#ifndef PR_THP_DISABLE_EXCEPT_ADVISED
#define PR_THP_DISABLE_EXCEPT_ADVISED (1 << 1)
#endif
#ifndef PR_SET_MEMORY_MERGE
#define PR_SET_MEMORY_MERGE 67
#define PR_GET_MEMORY_MERGE 68
#endif

static long want_thp, want_merge;
/* The second thread's answer: ask = 1, it writes mce and tsc, then done = 1. */
static int ask, done;
static long thr_mce;
static int thr_tsc;

static void *thr(void *arg) {
    (void)arg;
    for (;;) {
        while (__atomic_load_n(&ask, __ATOMIC_ACQUIRE) == 0) scn_futex(&ask, FUTEX_WAIT, 0, NULL);
        thr_mce = prctl(PR_MCE_KILL_GET, 0, 0, 0, 0);
        thr_tsc = -1;
        prctl(PR_GET_TSC, &thr_tsc, 0, 0, 0);
        __atomic_store_n(&ask, 0, __ATOMIC_RELEASE);
        scn_bump_and_wake(&done);
    }
    return NULL;
}

static int check(void) {
    int v = -1;
    CHECK(prctl(PR_GET_CHILD_SUBREAPER, &v, 0, 0, 0) == 0 && v == 1, "child subreaper %d, want 1", v);
    long thp = prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0);
    CHECK(thp == want_thp, "THP disable %ld, want %ld", thp, want_thp);
    long mce = prctl(PR_MCE_KILL_GET, 0, 0, 0, 0);
    CHECK(mce == PR_MCE_KILL_EARLY, "machine-check kill policy %ld, want early (%d)", mce, PR_MCE_KILL_EARLY);
    v = -1;
    CHECK(prctl(PR_GET_TSC, &v, 0, 0, 0) == 0 && v == PR_TSC_SIGSEGV, "TSC mode %d, want SIGSEGV (%d)", v, PR_TSC_SIGSEGV);
    long merge = prctl(PR_GET_MEMORY_MERGE, 0, 0, 0, 0);
    if (want_merge == 1) CHECK(merge == 1, "KSM merging %ld, want 1", merge);
    CHECK(scn_ask_thread(&ask, &done), "the second thread did not answer within 20 s");
    CHECK(thr_mce == PR_MCE_KILL_EARLY, "second thread: machine-check kill policy %ld, want early", thr_mce);
    CHECK(thr_tsc == PR_TSC_SIGSEGV, "second thread: TSC mode %d, want SIGSEGV", thr_tsc);
    return 1;
}

int main(void) {
    scn_name = "prctl";
    if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) scn_die("PR_SET_CHILD_SUBREAPER");
    if (prctl(PR_SET_THP_DISABLE, 1, PR_THP_DISABLE_EXCEPT_ADVISED, 0, 0) &&
        prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0))
        scn_die("PR_SET_THP_DISABLE");
    want_thp = prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0);
    if (prctl(PR_MCE_KILL, PR_MCE_KILL_SET, PR_MCE_KILL_EARLY, 0, 0)) scn_die("PR_MCE_KILL");
    want_merge = prctl(PR_SET_MEMORY_MERGE, 1, 0, 0, 0) == 0 ? 1 : 0;
    if (want_merge && prctl(PR_GET_MEMORY_MERGE, 0, 0, 0, 0) != 1) scn_die("PR_GET_MEMORY_MERGE after setting it");
    if (prctl(PR_SET_TSC, PR_TSC_SIGSEGV, 0, 0, 0)) scn_die("PR_SET_TSC");
    pthread_t t;
    if (pthread_create(&t, NULL, thr, NULL)) scn_die("pthread_create");
    scn_run(check, NULL);
}
