/* sched: scheduling state set the way a background job sets it, checked on
 * every check:
 *   main thread:   SCHED_BATCH at nice 7, I/O class idle;
 *   second thread: SCHED_IDLE with reset-on-fork, I/O best-effort level 6;
 *   the process:   oom_score_adj 500. */
#include "common.h"
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>

#define IOPRIO_WHO_PROCESS 1
#define IOPRIO_PRIO(c, d) (((c) << 13) | (d))
#define IOPRIO_CLASS_BE 2
#define IOPRIO_CLASS_IDLE 3

static pid_t main_tid, thr_tid;
static int started;

static void *thr(void *arg) {
    (void)arg;
    thr_tid = scn_gettid();
    struct sched_param sp = {0};
    if (sched_setscheduler(0, SCHED_IDLE | SCHED_RESET_ON_FORK, &sp)) scn_die("SCHED_IDLE");
    if (syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, IOPRIO_PRIO(IOPRIO_CLASS_BE, 6))) scn_die("ioprio_set");
    scn_bump_and_wake(&started);
    for (;;) pause();
    return NULL;
}

static int check(void) {
    int p = sched_getscheduler(main_tid);
    CHECK(p == SCHED_BATCH, "main thread: policy %d, want SCHED_BATCH (%d)", p, SCHED_BATCH);
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, (id_t)main_tid);
    CHECK(errno == 0 && nice == 7, "main thread: nice %d, want 7", nice);
    long io = syscall(SYS_ioprio_get, IOPRIO_WHO_PROCESS, main_tid);
    CHECK(io == IOPRIO_PRIO(IOPRIO_CLASS_IDLE, 0), "main thread: I/O priority %#lx, want %#x", io, IOPRIO_PRIO(IOPRIO_CLASS_IDLE, 0));
    p = sched_getscheduler(thr_tid);
    CHECK(p == (SCHED_IDLE | SCHED_RESET_ON_FORK), "second thread: policy %#x, want SCHED_IDLE|SCHED_RESET_ON_FORK (%#x)", p, SCHED_IDLE | SCHED_RESET_ON_FORK);
    io = syscall(SYS_ioprio_get, IOPRIO_WHO_PROCESS, thr_tid);
    CHECK(io == IOPRIO_PRIO(IOPRIO_CLASS_BE, 6), "second thread: I/O priority %#lx, want %#x", io, IOPRIO_PRIO(IOPRIO_CLASS_BE, 6));
    FILE *f = fopen("/proc/self/oom_score_adj", "r");
    int adj = -1;
    CHECK(f && fscanf(f, "%d", &adj) == 1, "read oom_score_adj");
    fclose(f);
    CHECK(adj == 500, "oom_score_adj %d, want 500", adj);
    return 1;
}

int main(void) {
    scn_name = "sched";
    main_tid = scn_gettid();
    struct sched_param sp = {0};
    if (sched_setscheduler(0, SCHED_BATCH, &sp)) scn_die("SCHED_BATCH");
    if (setpriority(PRIO_PROCESS, 0, 7)) scn_die("setpriority");
    if (syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, IOPRIO_PRIO(IOPRIO_CLASS_IDLE, 0))) scn_die("ioprio_set");
    FILE *f = fopen("/proc/self/oom_score_adj", "w");
    if (!f || fprintf(f, "500\n") < 0 || fclose(f)) scn_die("oom_score_adj");
    pthread_t t;
    if (pthread_create(&t, NULL, thr, NULL)) scn_die("pthread_create");
    if (!scn_wait_at_least(&started, 1, 20.0)) scn_die("thread start");
    scn_run(check, NULL);
}
