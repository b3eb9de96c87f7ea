/* posix_timers: three timer_create timers must survive, under their own ids:
 * a periodic CLOCK_MONOTONIC timer signalling SIGRTMIN+1 with a value, a
 * SIGEV_NONE CLOCK_REALTIME timer with 600 s to go, and a timer signalling
 * one thread (SIGEV_THREAD_ID). After restore each keeps its clock, signal,
 * value and a plausible remaining time, and the periodic ones still fire;
 * the thread timer's signals reach the worker thread and no other (known by
 * a thread-local mark, so this holds whether or not the thread kept its
 * tid). */
#include "common.h"
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>

static timer_t t_periodic, t_none, t_thread;
static volatile int fired, fired_thread, bad_value;
static volatile pid_t thread_tid;
static volatile int wrong_thread;
static __thread int is_worker;
static double none_armed_at;

static void on_rt(int s, siginfo_t *si, void *u) {
    (void)s; (void)u;
    if (si->si_value.sival_int == 42)
        fired++;
    else if (si->si_value.sival_int == 7) {
        fired_thread++;
        if (!is_worker)
            wrong_thread++;
    } else
        bad_value++;
}

static void *worker(void *a) {
    (void)a;
    is_worker = 1;
    thread_tid = (pid_t)syscall(SYS_gettid);
    for (;;)
        pause();
    return NULL;
}

static double left_of(timer_t t) {
    struct itimerspec its;
    if (timer_gettime(t, &its) != 0)
        return -1;
    return (double)its.it_value.tv_sec + (double)its.it_value.tv_nsec / 1e9;
}

static int check(void) {
    double l = left_of(t_none);
    double since = scn_now() - none_armed_at;
    CHECK(l > 0 && l <= 600.01 && l >= 600 - since - 2, "SIGEV_NONE timer has %.3f s left, %.3f s after arming", l, since);
    CHECK(left_of(t_periodic) > 0, "periodic timer is gone or disarmed");
    CHECK(left_of(t_thread) > 0, "thread timer is gone or disarmed");
    int f = fired, ft = fired_thread;
    double end = scn_now() + 10;
    while ((fired < f + 2 || fired_thread < ft + 2) && scn_now() < end) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    CHECK(fired >= f + 2, "periodic timer fired %d times in 10 s", fired - f);
    CHECK(fired_thread >= ft + 2, "thread timer fired %d times in 10 s", fired_thread - ft);
    CHECK(!wrong_thread, "the thread timer signalled another thread %d times", wrong_thread);
    CHECK(!bad_value, "a timer signal carried the wrong value");
    return 1;
}

int main(void) {
    scn_name = "posix_timers";
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_rt;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigaction(SIGRTMIN + 1, &sa, NULL);
    pthread_t th;
    pthread_create(&th, NULL, worker, NULL);
    while (!thread_tid)
        sched_yield();

    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_SIGNAL;
    ev.sigev_signo = SIGRTMIN + 1;
    ev.sigev_value.sival_int = 42;
    timer_create(CLOCK_MONOTONIC, &ev, &t_periodic);
    struct itimerspec its = {{0, 200 * 1000 * 1000}, {0, 200 * 1000 * 1000}};
    timer_settime(t_periodic, 0, &its, NULL);

    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_NONE;
    timer_create(CLOCK_REALTIME, &ev, &t_none);
    struct itimerspec far = {{0, 0}, {600, 0}};
    none_armed_at = scn_now();
    timer_settime(t_none, 0, &far, NULL);

    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = SIGRTMIN + 1;
    ev.sigev_value.sival_int = 7;
    ev._sigev_un._tid = thread_tid;
    timer_create(CLOCK_MONOTONIC, &ev, &t_thread);
    its.it_value.tv_nsec = its.it_interval.tv_nsec = 150 * 1000 * 1000;
    timer_settime(t_thread, 0, &its, NULL);
    scn_run(check, NULL);
}
