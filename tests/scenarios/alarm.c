/* alarm: alarm(600) armed before the dump must still be armed afterwards with
 * a plausible remaining time: at most what was set, and at least that minus the
 * time since it was set (the time spent as an image may or may not count).
 * A short alarm() set during a check must deliver SIGALRM through the restored
 * handler; then the long alarm is put back (a little shorter) for the next dump. */
#include "common.h"
#include <signal.h>
#include <sys/time.h>

static volatile int alrm_n;
static double armed_at;
static unsigned armed_for = 600;
static void on_alrm(int s) { (void)s; alrm_n++; }

static int check(void) {
    struct itimerval it;
    getitimer(ITIMER_REAL, &it);
    double left = (double)it.it_value.tv_sec + (double)it.it_value.tv_usec / 1e6;
    double since = scn_now() - armed_at;
    CHECK(left > 0, "alarm is no longer armed");
    CHECK(left <= armed_for + 0.01 && left >= armed_for - since - 2.0, "alarm has %.3f s left, %.3f s after alarm(%u)",
          left, since, armed_for);
    CHECK(it.it_interval.tv_sec == 0 && it.it_interval.tv_usec == 0, "alarm grew an interval");
    /* the pending alarm() value is what alarm() returns: swap in 1 s, wait, swap back */
    unsigned prev = alarm(1);
    CHECK(prev > 0 && prev <= armed_for, "alarm(1) returned %u", prev);
    double end = scn_now() + 10;
    int n = alrm_n;
    while (alrm_n == n && scn_now() < end) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    CHECK(alrm_n == n + 1, "SIGALRM from alarm(1) did not arrive within 10 s");
    armed_for = (unsigned)left - 5;
    armed_at = scn_now();
    alarm(armed_for);
    return 1;
}

int main(void) {
    scn_name = "alarm";
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alrm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    armed_at = scn_now();
    alarm(armed_for);
    scn_run(check, NULL);
}
