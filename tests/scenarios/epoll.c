/* epoll: an event loop's epoll instances, checked by waiting on them with
 * no timeout (the state is the same after every check):
 *   ep1 watches  the read end of a self-pipe holding one byte (level, data 0x1234),
 *                its write end (EPOLLOUT|EPOLLONESHOT, data 0x3333, already fired:
 *                it must stay silent), and ep2 (data 0x2222);
 *   ep2 watches  an eventfd at 0 (edge-triggered, data 0xfeed).
 * A check: ep1 reports only the pipe; after the eventfd is written, ep1
 * reports ep2 too and ep2 reports the eventfd once; the eventfd is read
 * back to 0. The watches must be keyed by the same fd numbers (EPOLL_CTL_MOD
 * on them works). */
#include "common.h"
#include <sys/epoll.h>
#include <sys/eventfd.h>

static int ep1, ep2, pr, pw, efd;

static int wait_on(int ep, uint64_t *datas, int max) {
    struct epoll_event ev[8];
    int n = epoll_wait(ep, ev, 8, 0);
    for (int i = 0; i < n && i < max; i++) datas[i] = ev[i].data.u64;
    return n;
}

static int has(const uint64_t *d, int n, uint64_t want) {
    for (int i = 0; i < n; i++)
        if (d[i] == want) return 1;
    return 0;
}

static int check(void) {
    uint64_t d[8];
    int n = wait_on(ep1, d, 8);
    CHECK(n == 1 && d[0] == 0x1234, "ep1 reported %d events (first %#llx), want only the pipe (0x1234)", n, n > 0 ? (unsigned long long)d[0] : 0ULL);
    uint64_t one = 1;
    CHECK(write(efd, &one, 8) == 8, "write the eventfd");
    n = wait_on(ep1, d, 8);
    CHECK(n == 2 && has(d, n, 0x1234) && has(d, n, 0x2222), "ep1 reported %d events after the eventfd was written, want the pipe and ep2", n);
    n = wait_on(ep2, d, 8);
    CHECK(n == 1 && d[0] == 0xfeed, "ep2 reported %d events, want the eventfd (0xfeed)", n);
    n = wait_on(ep2, d, 8);
    CHECK(n == 0, "ep2 reported the edge-triggered eventfd again (%d events)", n);
    uint64_t v;
    CHECK(read(efd, &v, 8) == 8 && v == 1, "read the eventfd back");
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0x1234};
    CHECK(epoll_ctl(ep1, EPOLL_CTL_MOD, pr, &ev) == 0, "EPOLL_CTL_MOD of fd %d in ep1: %s", pr, strerror(errno));
    ev.events = EPOLLIN | EPOLLET;
    ev.data.u64 = 0xfeed;
    CHECK(epoll_ctl(ep2, EPOLL_CTL_MOD, efd, &ev) == 0, "EPOLL_CTL_MOD of fd %d in ep2: %s", efd, strerror(errno));
    n = wait_on(ep1, d, 8);
    CHECK(n == 1 && d[0] == 0x1234, "ep1 reported %d events at the end, want only the pipe", n);
    return 1;
}

int main(void) {
    scn_name = "epoll";
    int p[2];
    if (pipe(p)) scn_die("pipe");
    pr = p[0];
    pw = p[1];
    if (write(pw, "x", 1) != 1) scn_die("write the pipe");
    efd = eventfd(0, EFD_NONBLOCK);
    ep1 = epoll_create1(EPOLL_CLOEXEC);
    ep2 = epoll_create1(0);
    if (efd < 0 || ep1 < 0 || ep2 < 0) scn_die("create");
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.u64 = 0xfeed};
    if (epoll_ctl(ep2, EPOLL_CTL_ADD, efd, &ev)) scn_die("watch the eventfd");
    ev.events = EPOLLIN;
    ev.data.u64 = 0x2222;
    if (epoll_ctl(ep1, EPOLL_CTL_ADD, ep2, &ev)) scn_die("watch ep2");
    ev.data.u64 = 0x1234;
    if (epoll_ctl(ep1, EPOLL_CTL_ADD, pr, &ev)) scn_die("watch the pipe");
    ev.events = EPOLLOUT | EPOLLONESHOT;
    ev.data.u64 = 0x3333;
    if (epoll_ctl(ep1, EPOLL_CTL_ADD, pw, &ev)) scn_die("watch the write end");
    uint64_t d[8];
    int n = wait_on(ep1, d, 8);
    if (n != 2 || !has(d, n, 0x3333)) scn_die("the one-shot watch did not fire (%d events)", n);
    scn_run(check, NULL);
}
