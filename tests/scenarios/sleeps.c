/* sleeps: threads each blocked in a call with a one-hour timeout, so that
 * none ends during a test. Four calls the kernel resumes from a restart block
 * after a stop: clock_nanosleep (relative), nanosleep, a futex wait and poll,
 * the last both with a timeout and without one (`tail -f` waits so, on a
 * pipe that stays empty here).
 * A stop (a dump, pmig's own freezes, job control) leaves such a thread in
 * restart_syscall, whose restart block stays in the old kernel: a capture
 * there must still restore the original call, not make it fail with EINTR.
 * Two calls that any interruption ends with EINTR, the freeze's included:
 * epoll_wait and sigtimedwait; the freeze must make them restart.
 * check: every thread is blocked again (state S) and none of the calls has
 * returned anything but a finished sleep. */
#include "common.h"
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>

#define NT 7
static int never;                 /* futex word, stays 0 */
static int started;
static pid_t tids[NT];
static volatile int bad[NT];       /* errno of an unexpected return, or -1 */
static const char *what[NT] = {"clock_nanosleep", "nanosleep", "futex wait", "poll", "epoll_wait",
                               "sigtimedwait", "poll without a timeout"};
static int ep = -1;
static int quiet[2] = {-1, -1};    /* a pipe nothing is written to */

static void *sleeper(void *arg) {
    int i = (int)(intptr_t)arg;
    tids[i] = scn_gettid();
    scn_bump_and_wake(&started);
    for (;;) {
        struct timespec ts = {3600, 0}, rem = {0, 0};
        long r;
        switch (i) {
        case 0: r = syscall(SYS_clock_nanosleep, CLOCK_MONOTONIC, 0, &ts, &ts); break;
        case 1: r = syscall(SYS_nanosleep, &ts, &rem); break;
        case 2:
            r = scn_futex(&never, FUTEX_WAIT_PRIVATE, 0, &ts);
            if (r < 0 && errno == ETIMEDOUT) r = 0;
            break;
        case 3: r = syscall(SYS_poll, NULL, 0, 3600 * 1000); break;
        case 6: {
            struct pollfd p = {.fd = quiet[0], .events = POLLIN};
            r = syscall(SYS_poll, &p, 1, -1);
            break;
        }
        case 4: {
            struct epoll_event ev;
            r = epoll_wait(ep, &ev, 1, 3600 * 1000);
            break;
        }
        default: {
            sigset_t set;
            sigemptyset(&set);
            sigaddset(&set, SIGUSR2);
            r = sigtimedwait(&set, NULL, &ts);
            if (r < 0 && errno == EAGAIN) r = 0;
            break;
        }
        }
        if (r != 0 && !bad[i]) bad[i] = r < 0 ? errno : -1;
    }
    return NULL;
}

/* The state letter of thread `tid` of this process. */
static char state_of(pid_t tid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
    if (scn_read_file(path, buf, sizeof buf) < 0) return '?';
    char *p = strrchr(buf, ')');
    return p && p[1] == ' ' ? p[2] : '?';
}

static int check(void) {
    /* Bounded: until each is blocked in its call again (after a restore it
     * first re-runs the call, or fails and calls again). */
    double end = scn_now() + 30;
    for (int i = 0; i < NT; i++) {
        while (state_of(tids[i]) != 'S' && scn_now() < end) {
            struct timespec ts = {0, 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        CHECK(state_of(tids[i]) == 'S', "the %s thread is in state %c", what[i], state_of(tids[i]));
    }
    for (int i = 0; i < NT; i++)
        CHECK(!bad[i], "the %s returned early: %s", what[i], bad[i] > 0 ? strerror(bad[i]) : "a non-zero result");
    return 1;
}

int main(void) {
    scn_name = "sleeps";
    ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) scn_die("epoll_create1");
    if (pipe2(quiet, O_CLOEXEC)) scn_die("pipe2");
    /* Blocked in every thread (they inherit it): sigtimedwait waits for it. */
    sigset_t usr2;
    sigemptyset(&usr2);
    sigaddset(&usr2, SIGUSR2);
    sigprocmask(SIG_BLOCK, &usr2, NULL);
    for (int i = 0; i < NT; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, sleeper, (void *)(intptr_t)i)) scn_die("pthread_create");
    }
    if (!scn_wait_at_least(&started, NT, 10)) scn_die("threads did not start");
    /* Until each sits in its call. */
    double end = scn_now() + 10;
    for (int i = 0; i < NT; i++)
        while (state_of(tids[i]) != 'S' && scn_now() < end) {
            struct timespec ts = {0, 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    scn_run(check, NULL);
}
