// Kernel objects with state: a pipe to itself holding unread data, an eventfd counter,
// a signalfd with a pending (blocked) SIGUSR1, a queued real-time signal with a value,
// an epoll set, an fcntl lock and a flock on a file, an open unlinked file, an itimer.
// Computes, then checks each at the end.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <unistd.h>
#include <fcntl.h>
#include <signal.h>
#include <errno.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/time.h>
#include <sys/wait.h>
static volatile sig_atomic_t rtval = -1, alarms;
static void on_rt(int s, siginfo_t *si, void *u) { (void)s; (void)u; rtval = si->si_value.sival_int; }
static void on_alrm(int s) { (void)s; alarms++; }
int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 15;
    const char *lm = argc > 2 ? argv[2] : "all";  // all | nolock | flockonly
    int dofcntl = !strcmp(lm, "all"), doflock = strcmp(lm, "nolock") != 0;
    int p[2]; pipe(p); fcntl(p[0], F_SETFL, O_NONBLOCK);
    char msg[3000]; for (int i = 0; i < 3000; i++) msg[i] = 'a' + i % 26;
    write(p[1], msg, sizeof msg);
    int efd = eventfd(0, EFD_NONBLOCK); uint64_t v = 12345; write(efd, &v, 8);
    sigset_t ss; sigemptyset(&ss); sigaddset(&ss, SIGUSR1); sigaddset(&ss, SIGRTMIN + 3);
    sigprocmask(SIG_BLOCK, &ss, NULL);
    sigset_t s1; sigemptyset(&s1); sigaddset(&s1, SIGUSR1);
    int sfd = signalfd(-1, &s1, SFD_NONBLOCK);
    kill(getpid(), SIGUSR1);
    struct sigaction sa = {0}; sa.sa_sigaction = on_rt; sa.sa_flags = SA_SIGINFO; sigaction(SIGRTMIN + 3, &sa, NULL);
    union sigval sv = {.sival_int = 4242}; sigqueue(getpid(), SIGRTMIN + 3, sv);
    int ep = epoll_create1(0);
    struct epoll_event e = {.events = EPOLLIN, .data.u64 = 1}; epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &e);
    e.data.u64 = 2; epoll_ctl(ep, EPOLL_CTL_ADD, efd, &e);
    e.data.u64 = 3; epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &e);
    char lk[64]; snprintf(lk, sizeof lk, "lock-%d", getpid());
    int lfd = open(lk, O_RDWR | O_CREAT, 0600); write(lfd, "lockfile", 8);
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 4};
    int r1 = dofcntl ? fcntl(lfd, F_SETLK, &fl) : -9;
    char lk2[64]; snprintf(lk2, sizeof lk2, "flock-%d", getpid());
    int ffd = open(lk2, O_RDWR | O_CREAT, 0600); int r2 = doflock ? flock(ffd, LOCK_EX) : -9;
    int nofile = argc > 3 && !strcmp(argv[3], "nofile");  // no open unlinked file
    int ufd = open("unlinked-tmp", O_RDWR | O_CREAT | O_TRUNC, 0600);
    for (int i = 0; i < 1000; i++) dprintf(ufd, "line %d\n", i);
    if (!nofile) unlink("unlinked-tmp");
    signal(SIGALRM, on_alrm);
    struct itimerval it = {{0, 200000}, {0, 200000}}; setitimer(ITIMER_REAL, &it, NULL);
    printf("setup lock %d flock %d\n", r1, r2); fflush(stdout);
    uint64_t x = 88172645463325252ULL, s = 0;
    for (long r = 0; r < rounds; r++) {
        for (long i = 0; i < 60000000; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; s += x >> 60; }
        printf("round %ld %llx\n", r, (unsigned long long)s); fflush(stdout);
    }
    it = (struct itimerval){{0, 0}, {0, 0}}; setitimer(ITIMER_REAL, &it, NULL);
    struct epoll_event evs[8]; int ne = epoll_wait(ep, evs, 8, 0); unsigned mask = 0;
    for (int i = 0; i < ne; i++) mask |= 1u << evs[i].data.u64;
    printf("epoll ready %d mask %x\n", ne, mask);
    char buf[4000]; ssize_t got = read(p[0], buf, sizeof buf);
    printf("pipe read %zd same %d\n", got, got == 3000 && !memcmp(buf, msg, 3000));
    uint64_t ev = 0; ssize_t er = read(efd, &ev, 8); printf("eventfd read %zd value %llu\n", er, (unsigned long long)ev);
    struct signalfd_siginfo si; ssize_t sr = read(sfd, &si, sizeof si);
    printf("signalfd read %zd signo %u\n", sr, sr > 0 ? si.ssi_signo : 0);
    sigset_t pend; sigpending(&pend); printf("rt pending %d\n", sigismember(&pend, SIGRTMIN + 3));
    sigset_t un; sigemptyset(&un); sigaddset(&un, SIGRTMIN + 3); sigprocmask(SIG_UNBLOCK, &un, NULL);
    printf("rt delivered value %d\n", (int)rtval);
    printf("alarms>=%d\n", alarms >= 5 ? 5 : (int)alarms);
    lseek(ufd, 0, SEEK_SET); char ub[20000]; ssize_t ur = read(ufd, ub, sizeof ub);
    printf("unlinked file read %zd\n", ur);
    fflush(stdout);
    pid_t c = fork();
    if (c == 0) {  // another process tries the locks
        int fd2 = open(lk, O_RDWR); struct flock f2 = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 4};
        int a = fcntl(fd2, F_SETLK, &f2); int ea = errno;
        int fd3 = open(lk2, O_RDWR); int b = flock(fd3, LOCK_EX | LOCK_NB); int eb = errno;
        printf("other process: fcntl lock %s, flock %s\n", a == 0 ? "GOT (lost lock!)" : (ea == EAGAIN || ea == EACCES) ? "busy" : "err",
               b == 0 ? "GOT (lost lock!)" : eb == EWOULDBLOCK ? "busy" : "err");
        fflush(stdout); _exit(0);
    }
    waitpid(c, NULL, 0);
    unlink(lk); unlink(lk2); if (nofile) unlink("unlinked-tmp");
    return 0;
}
