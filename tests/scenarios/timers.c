/* timers: interval timers stay armed across a dump and restore.
 *   ITIMER_REAL    periodic 200 ms: SIGALRM keeps arriving (and interrupts the
 *                  blocking read, which must restart: SA_RESTART);
 *   ITIMER_VIRTUAL 1000 s, interval 500 s (an idle process barely consumes it);
 *   ITIMER_PROF    2000 s, no interval.
 * The alarm scenario covers alarm() itself. */
#include "common.h"
#include <signal.h>
#include <sys/time.h>

static volatile int alrm_n;
static void on_alrm(int s) { (void)s; alrm_n++; }

static double tv(struct timeval t) { return (double)t.tv_sec + (double)t.tv_usec / 1e6; }

static int timer_ok(int which, const char *name, double value_max, double value_min, double interval) {
    struct itimerval it;
    CHECK(getitimer(which, &it) == 0, "getitimer %s", name);
    CHECK(tv(it.it_value) > 0, "%s is disarmed", name);
    CHECK(tv(it.it_value) <= value_max + 0.05 && tv(it.it_value) >= value_min, /* + tick rounding */ "%s remaining %.6f s, want %.3f..%.3f",
          name, tv(it.it_value), value_min, value_max);
    CHECK(tv(it.it_interval) == interval, "%s interval %.6f s, want %.6f", name, tv(it.it_interval), interval);
    return 1;
}

static int check(void) {
    struct sigaction sa;
    sigaction(SIGALRM, NULL, &sa);
    CHECK(sa.sa_handler == on_alrm && (sa.sa_flags & SA_RESTART), "SIGALRM handler lost");
    if (!timer_ok(ITIMER_REAL, "ITIMER_REAL", 0.2, 0.000001, 0.2)) return 0;
    if (!timer_ok(ITIMER_VIRTUAL, "ITIMER_VIRTUAL", 1000, 990, 500)) return 0;
    if (!timer_ok(ITIMER_PROF, "ITIMER_PROF", 2000, 1990, 0)) return 0;
    /* SIGALRM must keep arriving: wait (bounded) for 3 more */
    int start = alrm_n;
    double end = scn_now() + 10;
    sigset_t none;
    sigemptyset(&none);
    while (alrm_n < start + 3 && scn_now() < end) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);      /* interrupted by SIGALRM; bounded by end */
    }
    CHECK(alrm_n >= start + 3, "only %d SIGALRM in 10 s from a 200 ms ITIMER_REAL", alrm_n - start);
    return 1;
}

int main(void) {
    scn_name = "timers";
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alrm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval real = {{0, 200000}, {0, 200000}}, virt = {{500, 0}, {1000, 0}}, prof = {{0, 0}, {2000, 0}};
    if (setitimer(ITIMER_REAL, &real, NULL) || setitimer(ITIMER_VIRTUAL, &virt, NULL) || setitimer(ITIMER_PROF, &prof, NULL))
        scn_die("setitimer");
    scn_run(check, NULL);
}
