/* signals: handlers (SA_SIGINFO, SA_RESTART, SA_ONSTACK, SA_RESETHAND, SA_NODEFER,
 * masks, SIG_IGN), sigaltstack, the blocked mask, and pending signals that are
 * delivered only after a check unblocks them:
 *   process-wide: SIGUSR1 (kill) and SIGRTMIN+2 queued twice with values 11, 22;
 *   per-thread:   SIGRTMIN+3 (tgkill) on the main thread, SIGUSR2 on a second thread.
 * After delivery, each check blocks and raises them again for the next dump. */
#include "common.h"
#include <pthread.h>
#include <signal.h>

#define RT2 (SIGRTMIN + 2)
#define RT3 (SIGRTMIN + 3)
static volatile int usr1_n, usr1_code, usr1_pid, rt2_n, rt2_vals[4], rt3_n, rt3_tid, usr2_n, usr2_tid, winch_ok, winch_n;
static volatile int usr1_saw_usr2_blocked;
static char altstack[65536] __attribute__((aligned(16)));
static pid_t main_tid, thr_tid;
static int gen, acks;
static char thr_bad[200];
static sigset_t blockset;

static void h_usr1(int s, siginfo_t *si, void *uc) {
    (void)s; (void)uc;
    sigset_t cur;
    pthread_sigmask(SIG_BLOCK, NULL, &cur);
    usr1_saw_usr2_blocked = sigismember(&cur, SIGUSR2) && sigismember(&cur, SIGHUP);
    usr1_n++; usr1_code = si->si_code; usr1_pid = si->si_pid;
}
static void h_rt2(int s, siginfo_t *si, void *uc) {
    (void)s; (void)uc;
    if (rt2_n < 4 && si->si_code == SI_QUEUE) rt2_vals[rt2_n] = si->si_value.sival_int;
    rt2_n++;
}
static void h_rt3(int s, siginfo_t *si, void *uc) { (void)s; (void)uc; (void)si; rt3_n++; rt3_tid = scn_gettid(); }
static void h_usr2(int s, siginfo_t *si, void *uc) { (void)s; (void)uc; (void)si; usr2_n++; usr2_tid = scn_gettid(); }
static void h_winch(int s) {
    (void)s;
    char here;
    winch_ok = &here > altstack && &here < altstack + sizeof altstack;
    winch_n++;
}
static void h_plain(int s) { (void)s; }

struct want { int sig; int flags; void *handler; int masksig; };
static struct want wants[12];
static int nwant;

static void install(int sig, void *handler, int flags, int masksig) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_flags = flags;
    if (flags & SA_SIGINFO) sa.sa_sigaction = handler; else sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    if (masksig) { sigaddset(&sa.sa_mask, masksig); sigaddset(&sa.sa_mask, SIGHUP); }
    if (sigaction(sig, &sa, NULL)) scn_die("sigaction %d", sig);
    wants[nwant++] = (struct want){sig, flags, handler, masksig};
}

static void arm_pending(void) {     /* all blocked: they stay pending */
    kill(getpid(), SIGUSR1);
    sigqueue(getpid(), RT2, (union sigval){.sival_int = 11});
    sigqueue(getpid(), RT2, (union sigval){.sival_int = 22});
    syscall(SYS_tgkill, getpid(), main_tid, RT3);
}

static void *thr(void *arg) {
    (void)arg;
    thr_tid = scn_gettid();
    syscall(SYS_tgkill, getpid(), thr_tid, SIGUSR2);
    scn_bump_and_wake(&acks);
    for (int seen = 0;; seen++) {
        while (__atomic_load_n(&gen, __ATOMIC_ACQUIRE) == seen) scn_futex(&gen, FUTEX_WAIT_PRIVATE, seen, NULL);
        thr_bad[0] = 0;
        uint64_t pnd = scn_status_hex("/proc/thread-self/status", "SigPnd");
        if (!(pnd & (1ull << (SIGUSR2 - 1)))) snprintf(thr_bad, sizeof thr_bad, "thread: SIGUSR2 not pending on it (SigPnd %lx)", (unsigned long)pnd);
        int before = usr2_n;
        sigset_t u; sigemptyset(&u); sigaddset(&u, SIGUSR2);
        pthread_sigmask(SIG_UNBLOCK, &u, NULL);
        pthread_sigmask(SIG_BLOCK, &u, NULL);
        if (!thr_bad[0] && (usr2_n != before + 1 || usr2_tid != thr_tid))
            snprintf(thr_bad, sizeof thr_bad, "thread: SIGUSR2 delivered %d times, in tid %d (want %d)", usr2_n - before, usr2_tid, thr_tid);
        syscall(SYS_tgkill, getpid(), thr_tid, SIGUSR2);
        scn_bump_and_wake(&acks);
    }
    return NULL;
}

static int check(void) {
    for (int i = 0; i < nwant; i++) {
        struct sigaction sa;
        sigaction(wants[i].sig, NULL, &sa);
        int fl = sa.sa_flags & (SA_SIGINFO | SA_RESTART | SA_ONSTACK | SA_NODEFER | SA_RESETHAND);
        CHECK(fl == wants[i].flags, "signal %d: flags %#x, want %#x", wants[i].sig, fl, wants[i].flags);
        void *h = (sa.sa_flags & SA_SIGINFO) ? (void *)sa.sa_sigaction : (void *)sa.sa_handler;
        CHECK(h == wants[i].handler, "signal %d: handler %p, want %p", wants[i].sig, h, wants[i].handler);
        for (int s = 1; s < 65; s++) {
            if (s == 32 || s == 33) continue;
            int want = wants[i].masksig && (s == wants[i].masksig || s == SIGHUP);
            CHECK(sigismember(&sa.sa_mask, s) == want, "signal %d: sa_mask bit %d is %d", wants[i].sig, s, !want);
        }
    }
    stack_t ss;
    sigaltstack(NULL, &ss);
    CHECK(ss.ss_sp == altstack && ss.ss_size == sizeof altstack && ss.ss_flags == 0,
          "sigaltstack sp %p size %zu flags %d", ss.ss_sp, ss.ss_size, ss.ss_flags);
    sigset_t cur;
    pthread_sigmask(SIG_BLOCK, NULL, &cur);
    for (int s = 1; s < 65; s++)
        if (s != 32 && s != 33) CHECK(sigismember(&cur, s) == sigismember(&blockset, s), "main blocked mask bit %d wrong", s);
    uint64_t shd = scn_status_hex("/proc/self/status", "ShdPnd");
    uint64_t prv = scn_status_hex("/proc/thread-self/status", "SigPnd");
    uint64_t want_shd = (1ull << (SIGUSR1 - 1)) | (1ull << (RT2 - 1));
    CHECK((shd & want_shd) == want_shd, "process-wide pending %#lx lacks %#lx", (unsigned long)shd, (unsigned long)want_shd);
    CHECK(prv & (1ull << (RT3 - 1)), "main thread pending %#lx lacks SIGRTMIN+3", (unsigned long)prv);
    usr1_n = rt2_n = rt3_n = 0;
    rt2_vals[0] = rt2_vals[1] = 0;
    sigset_t u; sigemptyset(&u);
    sigaddset(&u, SIGUSR1); sigaddset(&u, RT2); sigaddset(&u, RT3);
    pthread_sigmask(SIG_UNBLOCK, &u, NULL);
    pthread_sigmask(SIG_BLOCK, &u, NULL);
    CHECK(usr1_n == 1 && usr1_code == SI_USER && usr1_pid == getpid(), "SIGUSR1: n=%d code=%d pid=%d", usr1_n, usr1_code, usr1_pid);
    CHECK(usr1_saw_usr2_blocked, "SIGUSR1 handler ran without its sa_mask applied");
    CHECK(rt2_n == 2 && rt2_vals[0] == 11 && rt2_vals[1] == 22, "SIGRTMIN+2: n=%d values %d,%d (want 2: 11,22)", rt2_n, rt2_vals[0], rt2_vals[1]);
    CHECK(rt3_n == 1 && rt3_tid == main_tid, "SIGRTMIN+3: n=%d in tid %d (want 1 in %d)", rt3_n, rt3_tid, main_tid);
    arm_pending();
    int target = acks + 1;
    scn_bump_and_wake(&gen);
    CHECK(scn_wait_at_least(&acks, target, 20.0), "second thread did not wake within 20s");
    CHECK(!thr_bad[0], "%s", thr_bad);
    int wn = winch_n;
    raise(SIGWINCH);
    CHECK(winch_n == wn + 1 && winch_ok, "SA_ONSTACK handler: ran %d times, on alt stack %d", winch_n - wn, winch_ok);
    return 1;
}

int main(void) {
    scn_name = "signals";
    main_tid = scn_gettid();
    stack_t ss = {.ss_sp = altstack, .ss_size = sizeof altstack, .ss_flags = 0};
    if (sigaltstack(&ss, NULL)) scn_die("sigaltstack");
    install(SIGUSR1, h_usr1, SA_SIGINFO | SA_RESTART, SIGUSR2);
    install(RT2, h_rt2, SA_SIGINFO | SA_RESTART, 0);
    install(RT3, h_rt3, SA_SIGINFO, 0);
    install(SIGUSR2, h_usr2, SA_SIGINFO | SA_RESTART, 0);
    install(SIGWINCH, h_winch, SA_ONSTACK | SA_NODEFER | SA_RESTART, 0);
    install(SIGINT, h_plain, SA_RESETHAND, SIGQUIT);
    install(SIGPIPE, SIG_IGN, 0, 0);
    install(SIGTERM, SIG_DFL, 0, 0);
    /* pmig's own traps (int3) raise SIGTRAP inside the process. */
    install(SIGTRAP, h_plain, SA_RESTART, 0);
    sigemptyset(&blockset);
    sigaddset(&blockset, SIGUSR1); sigaddset(&blockset, SIGUSR2); sigaddset(&blockset, RT2);
    sigaddset(&blockset, RT3); sigaddset(&blockset, SIGHUP); sigaddset(&blockset, SIGRTMIN + 7);
    if (pthread_sigmask(SIG_SETMASK, &blockset, NULL)) scn_die("sigmask");
    pthread_t t;
    if (pthread_create(&t, NULL, thr, NULL)) scn_die("pthread_create");   /* inherits the mask */
    if (!scn_wait_at_least(&acks, 1, 20.0)) scn_die("thread start");
    arm_pending();
    scn_run(check, NULL);
}
