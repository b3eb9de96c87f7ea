/* timerfd: the timers of an event loop, checked through timerfd_gettime,
 * their fdinfo and what they deliver:
 *   tick   CLOCK_MONOTONIC every 20 ms, non-blocking, watched by an epoll:
 *          its interval is still 20 ms, its next expiry at most 20 ms away,
 *          and the epoll reports it within 2 s; every check ends with it
 *          expired and not read, as a busy loop leaves it (the kernel arms
 *          it again only when it is read or asked its time);
 *   far    CLOCK_MONOTONIC, absolute, due an hour after the setup: still
 *          absolute (fdinfo "settime flags") and due at the same deadline of
 *          the process's own clock (to 2 s);
 *   wall   CLOCK_REALTIME, absolute and cancel-on-set, due an hour after the
 *          setup: both flags kept, due at the same wall-clock time (to 2 s);
 *   fired  a one-shot that expired before the check and was never read
 *          (blocking, dup'ed onto fd 31, one open file): exactly one
 *          expiration to read, then disarmed; the check arms it again and
 *          waits for it to expire, so that every check starts the same;
 *   idle   CLOCK_BOOTTIME, disarmed, with the 5 s interval of its last
 *          setting: still disarmed, the interval still 5 s. */
#include "common.h"
#include <poll.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>

#define DUP_FD 31
#define NSEC 1000000000LL
#define TICK_NS (20 * 1000000LL)
#define HOUR_NS (3600 * NSEC)
#define SLACK_NS (2 * NSEC)

static int tick, far, wall, fired, idle, ep;
static long long far_due, wall_due;

static long long ns_of(const struct timespec *t) { return t->tv_sec * NSEC + t->tv_nsec; }

static long long now_ns(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return ns_of(&t);
}

static long long llabs_(long long v) { return v < 0 ? -v : v; }

/* The "settime flags" of an fd's fdinfo, or -1. */
static int settime_flags(int fd) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
    ssize_t n = scn_read_file(path, buf, sizeof buf);
    if (n <= 0) return -1;
    char *p = strstr(buf, "settime flags:");
    return p ? (int)strtol(p + 14, NULL, 8) : -1;
}

static int readable(int fd, int timeout_ms) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

static int check(void) {
    struct itimerspec its;
    CHECK(timerfd_gettime(tick, &its) == 0, "gettime tick: %s", strerror(errno));
    CHECK(ns_of(&its.it_interval) == TICK_NS, "tick interval %lld ns, want %lld", ns_of(&its.it_interval), TICK_NS);
    /* 0 is an expiry the kernel has not processed yet: the hrtimer's time
     * has passed, its interrupt not come (timerfd_gettime clamps what is
     * left at 0); the interval above shows the timer still armed. */
    CHECK(ns_of(&its.it_value) >= 0 && ns_of(&its.it_value) <= TICK_NS, "tick next expiry in %lld ns", ns_of(&its.it_value));
    struct epoll_event ev;
    int n = epoll_wait(ep, &ev, 1, 2000);
    CHECK(n == 1 && ev.data.u64 == 0x7eed, "the epoll did not report tick (%d: %s)", n, strerror(errno));
    uint64_t count = 0;
    CHECK(read(tick, &count, 8) == 8 && count >= 1, "read tick: %s", strerror(errno));

    CHECK(timerfd_gettime(far, &its) == 0, "gettime far");
    long long due = now_ns(CLOCK_MONOTONIC) + ns_of(&its.it_value);
    CHECK(llabs_(due - far_due) < SLACK_NS, "far is due %lld ms from where it was", (due - far_due) / 1000000);
    CHECK(settime_flags(far) == TFD_TIMER_ABSTIME, "far settime flags %o", settime_flags(far));

    CHECK(timerfd_gettime(wall, &its) == 0, "gettime wall");
    due = now_ns(CLOCK_REALTIME) + ns_of(&its.it_value);
    CHECK(llabs_(due - wall_due) < SLACK_NS, "wall is due %lld ms from where it was", (due - wall_due) / 1000000);
    CHECK(settime_flags(wall) == (TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET), "wall settime flags %o", settime_flags(wall));

    CHECK(readable(fired, 0), "fired has no expiration to read");
    count = 0;
    CHECK(read(DUP_FD, &count, 8) == 8 && count == 1, "fired read %llu expirations, want 1", (unsigned long long)count);
    CHECK(!readable(fired, 0), "fired still readable after its one expiration was read");
    CHECK(timerfd_gettime(fired, &its) == 0 && ns_of(&its.it_value) == 0, "fired is armed");
    CHECK(!(fcntl(fired, F_GETFL) & O_NONBLOCK), "fired became non-blocking");
    struct itimerspec once = {.it_value = {0, 1000000}};
    CHECK(timerfd_settime(fired, 0, &once, NULL) == 0, "arm fired again");
    CHECK(readable(fired, 2000), "fired did not expire again");

    CHECK(timerfd_gettime(idle, &its) == 0, "gettime idle");
    CHECK(ns_of(&its.it_value) == 0, "idle is armed (%lld ns left)", ns_of(&its.it_value));
    CHECK(ns_of(&its.it_interval) == 5 * NSEC, "idle interval %lld ns, want 5 s", ns_of(&its.it_interval));
    struct timespec pause = {0, 2 * TICK_NS};
    nanosleep(&pause, NULL);
    return 1;
}

int main(void) {
    scn_name = "timerfd";
    tick = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    far = timerfd_create(CLOCK_MONOTONIC, 0);
    wall = timerfd_create(CLOCK_REALTIME, 0);
    fired = timerfd_create(CLOCK_MONOTONIC, 0);
    idle = timerfd_create(CLOCK_BOOTTIME, 0);
    ep = epoll_create1(0);
    if (tick < 0 || far < 0 || wall < 0 || fired < 0 || idle < 0 || ep < 0) scn_die("create");
    struct itimerspec t = {.it_interval = {0, TICK_NS}, .it_value = {0, TICK_NS}};
    if (timerfd_settime(tick, 0, &t, NULL)) scn_die("arm tick");
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0x7eed};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, tick, &ev)) scn_die("watch tick");
    far_due = now_ns(CLOCK_MONOTONIC) + HOUR_NS;
    struct itimerspec a = {.it_value = {far_due / NSEC, far_due % NSEC}};
    if (timerfd_settime(far, TFD_TIMER_ABSTIME, &a, NULL)) scn_die("arm far");
    wall_due = now_ns(CLOCK_REALTIME) + HOUR_NS;
    struct itimerspec w = {.it_value = {wall_due / NSEC, wall_due % NSEC}};
    if (timerfd_settime(wall, TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET, &w, NULL)) scn_die("arm wall");
    struct itimerspec once = {.it_value = {0, 1000000}};
    if (timerfd_settime(fired, 0, &once, NULL)) scn_die("arm fired");
    if (!readable(fired, 2000)) scn_die("fired did not expire");
    if (dup2(fired, DUP_FD) != DUP_FD) scn_die("dup2");
    struct itimerspec i = {.it_interval = {5, 0}};
    if (timerfd_settime(idle, 0, &i, NULL)) scn_die("set idle");
    scn_run(check, NULL);
}
