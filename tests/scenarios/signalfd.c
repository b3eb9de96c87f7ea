/* signalfd: SIGUSR1 and SIGRTMIN+2 blocked and read through a non-blocking
 * signalfd (dup'ed onto fd 33). A check sends itself both signals and must
 * read exactly those two from the signalfd, then nothing; a signal outside
 * the mask (SIGUSR2, blocked too) stays pending and is not read from it. */
#include "common.h"
#include <signal.h>
#include <sys/signalfd.h>

#define DUP_FD 33

static int sfd;

static int check(void) {
    struct signalfd_siginfo si;
    CHECK(read(sfd, &si, sizeof si) < 0 && errno == EAGAIN, "the signalfd had a signal before the check");
    CHECK(kill(getpid(), SIGUSR1) == 0 && kill(getpid(), SIGRTMIN + 2) == 0 && kill(getpid(), SIGUSR2) == 0, "kill");
    int got = 0;
    for (int i = 0; i < 2; i++) {
        CHECK(read(DUP_FD, &si, sizeof si) == (ssize_t)sizeof si, "read %d from the signalfd: %s", i, strerror(errno));
        if (si.ssi_signo == SIGUSR1) got |= 1;
        else if (si.ssi_signo == (uint32_t)(SIGRTMIN + 2)) got |= 2;
        else return scn_fail("the signalfd gave signal %u", si.ssi_signo);
    }
    CHECK(got == 3, "signals read: %#x, want SIGUSR1 and SIGRTMIN+2", got);
    CHECK(read(sfd, &si, sizeof si) < 0 && errno == EAGAIN, "the signalfd gave a third signal (%u)", si.ssi_signo);
    sigset_t pend;
    sigpending(&pend);
    CHECK(sigismember(&pend, SIGUSR2), "SIGUSR2 is not pending");
    /* Take SIGUSR2 back off, so that every check starts the same. */
    sigset_t u2;
    sigemptyset(&u2);
    sigaddset(&u2, SIGUSR2);
    int s = 0;
    CHECK(sigwait(&u2, &s) == 0 && s == SIGUSR2, "sigwait SIGUSR2");
    return 1;
}

int main(void) {
    scn_name = "signalfd";
    sigset_t m;
    sigemptyset(&m);
    sigaddset(&m, SIGUSR1);
    sigaddset(&m, SIGRTMIN + 2);
    sigset_t blocked = m;
    sigaddset(&blocked, SIGUSR2);
    if (sigprocmask(SIG_BLOCK, &blocked, NULL)) scn_die("sigprocmask");
    sfd = signalfd(-1, &m, SFD_NONBLOCK);
    if (sfd < 0) scn_die("signalfd");
    if (dup2(sfd, DUP_FD) != DUP_FD) scn_die("dup2");
    scn_run(check, NULL);
}
