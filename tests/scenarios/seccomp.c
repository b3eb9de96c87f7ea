/* seccomp: two seccomp filters, stacked, checked on every check:
 *   filter 1 (installed first): getpriority fails with errno 77; getitimer
 *     and close_range kill the process (pmig's capture reads the interval
 *     timers with an injected getitimer, and its restorer's last call is a
 *     close_range: both must pass no filter while pmig works on the
 *     process, and the process itself never makes either call);
 *   filter 2 (SECCOMP_FILTER_FLAG_LOG): sysinfo fails with errno 78;
 *   every other call is allowed; a call of another architecture kills;
 *   no_new_privs is set (an unprivileged filter needs it).
 * A second thread, created after the filters, and a third created at each
 * check (so after a restore) must see both. The second thread then
 * installs a third filter of its own (getppid fails with errno 79), which
 * the main thread and the thread created at each check must not have. The
 * status file must say "Seccomp: 2" and, where the kernel counts them,
 * "Seccomp_filters: 2" (3 for the second thread). */
#include "common.h"
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stddef.h>
#include <sys/prctl.h>

#ifndef SYS_close_range
#define SYS_close_range 436
#endif

#define LOAD_NR BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr))
#define LOAD_ARCH BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch))
#define RET(v) BPF_STMT(BPF_RET | BPF_K, (v))
/* If the loaded value is `v`, return `r`; else go on. */
#define IF_RET(v, r) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (v), 0, 1), RET(r)

static struct sock_filter first[] = {
    LOAD_ARCH,
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
    RET(SECCOMP_RET_KILL_PROCESS),
    LOAD_NR,
    IF_RET(SYS_getpriority, SECCOMP_RET_ERRNO | 77),
    IF_RET(SYS_getitimer, SECCOMP_RET_KILL_PROCESS),
    IF_RET(SYS_close_range, SECCOMP_RET_KILL_PROCESS),
    RET(SECCOMP_RET_ALLOW),
};

static struct sock_filter second[] = {
    LOAD_NR,
    IF_RET(SYS_sysinfo, SECCOMP_RET_ERRNO | 78),
    RET(SECCOMP_RET_ALLOW),
};

/* The second thread's own. */
static struct sock_filter own[] = {
    LOAD_NR,
    IF_RET(SYS_getppid, SECCOMP_RET_ERRNO | 79),
    RET(SECCOMP_RET_ALLOW),
};

static void install(struct sock_filter *f, unsigned short n, unsigned flags) {
    struct sock_fprog prog = {n, f};
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog) != 0) scn_die("seccomp(SET_MODE_FILTER)");
}

/* 0 if the calling thread has the second thread's own filter (`mine`) or
 * has not, as it should, else a reason in buf. */
static int own_filter_is(int mine, char *buf, size_t cap) {
    errno = 0;
    long r = syscall(SYS_getppid);
    if (mine ? (r != -1 || errno != 79) : r <= 0) {
        snprintf(buf, cap, "getppid returned %ld, errno %d: want %s (the second thread's own filter)", r, errno,
                 mine ? "-1, errno 79" : "a pid");
        return -1;
    }
    return 0;
}

/* 0 if both filters hold in the calling thread, else a reason in buf. */
static int filters_hold(char *buf, size_t cap) {
    errno = 0;
    long r = syscall(SYS_getpriority, 0 /* PRIO_PROCESS */, 0);
    if (r != -1 || errno != 77) {
        snprintf(buf, cap, "getpriority returned %ld, errno %d: want -1, errno 77 (filter 1)", r, errno);
        return -1;
    }
    char info[512];
    errno = 0;
    r = syscall(SYS_sysinfo, info);
    if (r != -1 || errno != 78) {
        snprintf(buf, cap, "sysinfo returned %ld, errno %d: want -1, errno 78 (filter 2)", r, errno);
        return -1;
    }
    r = syscall(SYS_getpid);
    if (r <= 0) {
        snprintf(buf, cap, "getpid returned %ld: an allowed call failed", r);
        return -1;
    }
    return 0;
}

/* The second thread answers when asked (ask = 1): its verdict, then done++. */
static int ask, done, thr_ok, thr_tid;
static char thr_why[256];

static void *thr(void *arg) {
    (void)arg;
    install(own, sizeof own / sizeof own[0], 0);
    __atomic_store_n(&thr_tid, scn_gettid(), __ATOMIC_RELEASE);
    for (;;) {
        while (__atomic_load_n(&ask, __ATOMIC_ACQUIRE) == 0) scn_futex(&ask, FUTEX_WAIT, 0, NULL);
        thr_ok = filters_hold(thr_why, sizeof thr_why) == 0 && own_filter_is(1, thr_why, sizeof thr_why) == 0;
        __atomic_store_n(&ask, 0, __ATOMIC_RELEASE);
        scn_bump_and_wake(&done);
    }
    return NULL;
}

static char fresh_why[256];
static void *fresh(void *arg) {
    (void)arg;
    return (void *)(long)(filters_hold(fresh_why, sizeof fresh_why) == 0 &&
                          own_filter_is(0, fresh_why, sizeof fresh_why) == 0);
}

static int check(void) {
    char v[64];
    CHECK(scn_status_field("/proc/self/status", "Seccomp", v, sizeof v) == 0 && !strcmp(v, "2"),
          "Seccomp mode '%s', want 2 (filter)", v);
    if (scn_status_field("/proc/self/status", "Seccomp_filters", v, sizeof v) == 0)
        CHECK(!strcmp(v, "2"), "Seccomp_filters '%s', want 2", v);
    CHECK(scn_status_field("/proc/self/status", "NoNewPrivs", v, sizeof v) == 0 && !strcmp(v, "1"),
          "NoNewPrivs '%s', want 1", v);
    char why[256];
    CHECK(filters_hold(why, sizeof why) == 0, "main thread: %s", why);
    CHECK(own_filter_is(0, why, sizeof why) == 0, "main thread: %s", why);
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/status", thr_tid);
    if (scn_status_field(path, "Seccomp_filters", v, sizeof v) == 0)
        CHECK(!strcmp(v, "3"), "second thread: Seccomp_filters '%s', want 3", v);
    CHECK(scn_ask_thread(&ask, &done), "the second thread did not answer within 20 s");
    CHECK(thr_ok, "second thread: %s", thr_why);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, fresh, NULL) == 0, "pthread_create at the check failed");
    void *ok = NULL;
    CHECK(pthread_join(t, &ok) == 0, "pthread_join failed");
    CHECK(ok != NULL, "a thread created at the check: %s", fresh_why);
    return 1;
}

int main(void) {
    scn_name = "seccomp";
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) scn_die("PR_SET_NO_NEW_PRIVS");
    install(first, sizeof first / sizeof first[0], 0);
    install(second, sizeof second / sizeof second[0], SECCOMP_FILTER_FLAG_LOG);
    pthread_t t;
    if (pthread_create(&t, NULL, thr, NULL)) scn_die("pthread_create");
    for (int i = 0; i < 1000 && !__atomic_load_n(&thr_tid, __ATOMIC_ACQUIRE); i++) usleep(1000);
    if (!__atomic_load_n(&thr_tid, __ATOMIC_ACQUIRE)) scn_die("the second thread did not start");
    scn_run(check, NULL);
}
