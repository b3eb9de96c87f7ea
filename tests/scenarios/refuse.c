/* refuse MODE [ARG]: a process holding state that pmig dump must refuse.
 *   socket          an AF_UNIX datagram socket bound to an abstract name and
 *                   an AF_INET TCP socket
 *   child           a child process (dies with us: PR_SET_PDEATHSIG)
 *   iouring         an io_uring instance (rings mapped). If io_uring_setup gives
 *                   ENOSYS, prints "SKIP io_uring: ..." instead of READY and exits 0.
 *   sysvshm ID SLOT a System V shm segment (made by the harness) attached here
 *                   and in another, unrelated process; SLOT picks our half.
 *   plain           nothing special (the tracer test runs it under a tracer)
 *   sharedflock     an flock() lock on an open file an unrelated process (a
 *                   grandchild) also holds; it exits when we are gone.
 *   waitedlock      an flock() lock another process (a grandchild) waits
 *                   for; it exits when it gets it, once we are gone.
 *   lease           a read lease (F_SETLEASE) on a file of its working
 *                   directory.
 *   openedlock      a POSIX lock, held throughout, on a file an unrelated
 *                   process (a grandchild) has open too, without a lock;
 *                   it exits when we are gone.
 *   seccomp-strict  seccomp strict mode (only read, write, exit, sigreturn),
 *                   entered at the first check; quit ends with a raw exit.
 *   sharedpipe      a self-pipe whose read end an unrelated process (a
 *                   grandchild, reparented) also holds; it exits at
 *                   end-of-file, when we are gone.
 *   sharedfifo      a named pipe ("shared.fifo" in the working directory,
 *                   removed at exit) whose read end an unrelated process
 *                   (a grandchild, reparented) also holds; it exits at
 *                   end-of-file, when we are gone.
 *   deletedfifo     a named pipe removed from its directory, both ends
 *                   still held.
 *   sharedeventfd   an eventfd an unrelated process (a grandchild) also
 *                   holds; it exits when we are gone (it polls our pidfd).
 *   sharedepoll     the same with an epoll instance.
 *   sharedtimerfd   the same with a timerfd.
 *   sharedinotify   the same with an inotify instance.
 *   inotifyqueued   an inotify instance with an event not yet read.
 *   rdwrpipe        a self-pipe and its read end opened again, read-write,
 *                   through /proc/self/fd.
 *   mqueue          a POSIX message queue, still named (unlinked at exit).
 *   aio             an asynchronous I/O context (io_setup: its ring mapped).
 *   zombie          a child that exited (status 7) and is not waited for.
 *   procfd          /proc/self/status held open.
 *   aliasedshm      shared anonymous memory seen through a second view of
 *                   the same pages (mremap with old size 0); a third
 *                   mapping of another such object, split by mprotect
 *                   into parts that do not overlap, is no reason to refuse.
 *   sigio           a pipe's read end in signal-driven mode (O_ASYNC,
 *                   F_SETOWN to us).
 *   threadfs        a thread that unshared its working directory, root and
 *                   umask (unshare(CLONE_FS)) and entered "/", while the
 *                   process stays where it started.
 *   threadcreds     a thread whose effective group id is not the process's
 *                   (the raw setresgid call changes only the caller's).
 *   seccomp-notify  a seccomp filter that hands getpriority to a supervisor
 *                   (SECCOMP_RET_USER_NOTIF; with no listener the call fails
 *                   with ENOSYS, which check verifies).
 * check verifies the resource is still there and intact. */
#include "common.h"
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/eventfd.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <poll.h>
#include <dirent.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>

static const char *mode;
static volatile int fs_tid; /* threadfs: that thread's id */
static volatile int creds_tid; /* threadcreds: that thread's id */
static int fd1 = -1, fd2 = -1;
static pid_t child;
static char *shm, *view, *split;
static int slot;
#define SHM_HALF (512 * 1024)

static int is_sock(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
}

/* Whether fd `fd`'s fdinfo has a line containing `what`. */
static int fdinfo_says(int fd, const char *what) {
    char p[64], info[1024];
    snprintf(p, sizeof p, "/proc/self/fdinfo/%d", fd);
    FILE *f = fopen(p, "r");
    if (!f) return 0;
    size_t n = fread(info, 1, sizeof info - 1, f);
    fclose(f);
    info[n] = 0;
    return strstr(info, what) != NULL;
}

/* Whether /proc/locks shows a request waiting for a lock on fd `fd`'s
 * file (" -> " and its inode). */
static int waited_for(int fd) {
    struct stat st;
    char line[256], ino[32];
    if (fstat(fd, &st)) return 0;
    snprintf(ino, sizeof ino, ":%lu ", (unsigned long)st.st_ino);
    FILE *f = fopen("/proc/locks", "r");
    if (!f) return 0;
    int found = 0;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, "-> ") && strstr(line, ino);
    fclose(f);
    return found;
}

/* Whether another process has `path` (of our working directory) open:
 * one of the fds in /proc names it. */
static int opened_elsewhere(const char *path) {
    char want[4096], dir[64], p[4096 + 64], link[4096];
    if (!realpath(path, want)) return 0;
    DIR *proc = opendir("/proc");
    if (!proc) return 0;
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(proc))) {
        int pid = atoi(e->d_name);
        if (pid <= 0 || pid == getpid()) continue;
        snprintf(dir, sizeof dir, "/proc/%d/fd", pid);
        DIR *fds = opendir(dir);
        if (!fds) continue;
        struct dirent *f;
        while (!found && (f = readdir(fds))) {
            snprintf(p, sizeof p, "%s/%s", dir, f->d_name);
            ssize_t n = readlink(p, link, sizeof link - 1);
            if (n > 0) {
                link[n] = 0;
                found = !strcmp(link, want);
            }
        }
        closedir(fds);
    }
    closedir(proc);
    return found;
}

static int strict_on;
static char mq_name[64];

static void unlink_mq(void) { syscall(SYS_mq_unlink, mq_name + 1); }
static void unlink_fifo(void) { unlink("shared.fifo"); }

static void exit_strict(void) {
    if (strict_on) syscall(SYS_exit, scn_any_failed ? 1 : 0);   /* exit_group is not allowed */
}

static int check(void) {
    if (!strcmp(mode, "seccomp-strict")) {
        /* Reaching here again (and answering) proves it alive: in strict
         * mode any other system call would have killed it. */
        if (!strict_on && prctl(PR_SET_SECCOMP, 1 /* SECCOMP_MODE_STRICT */) != 0)
            CHECK(0, "prctl(PR_SET_SECCOMP, strict): %s", strerror(errno));
        strict_on = 1;
    } else if (!strcmp(mode, "sharedflock") || !strcmp(mode, "waitedlock")) {
        CHECK(fdinfo_says(fd1, "FLOCK  ADVISORY  WRITE"), "the lock on fd %d is gone", fd1);
    } else if (!strcmp(mode, "openedlock")) {
        CHECK(fdinfo_says(fd1, "POSIX  ADVISORY  WRITE"), "the lock on fd %d is gone", fd1);
    } else if (!strcmp(mode, "lease")) {
        CHECK(fcntl(fd1, F_GETLEASE) == F_RDLCK, "the lease on fd %d is gone", fd1);
    } else if (!strcmp(mode, "mqueue")) {
        CHECK(fcntl(fd1, F_GETFD) >= 0, "the message queue's fd %d is gone", fd1);
    } else if (!strcmp(mode, "socket")) {
        CHECK(is_sock(fd1) && is_sock(fd2), "sockets gone");
    } else if (!strcmp(mode, "child")) {
        int st;
        CHECK(waitpid(child, &st, WNOHANG) == 0, "child %d is no longer running", child);
    } else if (!strcmp(mode, "zombie")) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        CHECK(waitid(P_PID, child, &si, WEXITED | WNOWAIT | WNOHANG) == 0 && si.si_pid == child,
              "child %d cannot be waited for: %s", child, strerror(errno));
        CHECK(si.si_code == CLD_EXITED && si.si_status == 7, "child %d: code %d status %d",
              child, si.si_code, si.si_status);
    } else if (!strcmp(mode, "aliasedshm")) {
        shm[100] ^= 0x5a;
        CHECK(shm[100] == view[100], "the two views differ");
        shm[100] ^= 0x5a;
        CHECK(split[0] == 'a' && split[2 * 4096] == 'b', "the split mapping lost its data");
    } else if (!strcmp(mode, "procfd")) {
        char b[4096];
        ssize_t n = pread(fd1, b, sizeof b - 1, 0);
        CHECK(n > 0, "read /proc/self/status: %s", strerror(errno));
        b[n] = 0;
        char want[32];
        snprintf(want, sizeof want, "\nPid:\t%d\n", (int)getpid());
        CHECK(strstr(b, want) != NULL, "the status read names another process");
    } else if (!strcmp(mode, "sigio")) {
        int fl = fcntl(fd1, F_GETFL);
        CHECK(fl >= 0 && (fl & O_ASYNC), "O_ASYNC is gone (flags %#x)", fl);
        CHECK(fcntl(fd1, F_GETOWN) == getpid(), "the owner is %d", fcntl(fd1, F_GETOWN));
    } else if (!strcmp(mode, "iouring")) {
        char link[64] = "";
        char p[64];
        snprintf(p, sizeof p, "/proc/self/fd/%d", fd1);
        CHECK(readlink(p, link, sizeof link - 1) > 0 && strstr(link, "io_uring"), "io_uring fd is '%s'", link);
    } else if (!strcmp(mode, "sysvshm")) {
        long bad = scn_verify(shm + (size_t)slot * SHM_HALF, SHM_HALF, 50 + (uint64_t)slot);
        CHECK(bad < 0, "shm slot %d word %ld", slot, bad);
        struct shmid_ds ds;
        CHECK(shmctl(fd1, IPC_STAT, &ds) == 0, "IPC_STAT");
        CHECK(ds.shm_nattch >= 2, "shm segment has %lu attaches, want >= 2", (unsigned long)ds.shm_nattch);
    } else if (!strcmp(mode, "sharedeventfd") || !strcmp(mode, "sharedepoll") || !strcmp(mode, "sharedtimerfd") ||
               !strcmp(mode, "sharedinotify") || !strcmp(mode, "inotifyqueued")) {
        char link[64] = "", p[64];
        snprintf(p, sizeof p, "/proc/self/fd/%d", fd1);
        const char *want = !strcmp(mode, "sharedepoll")     ? "eventpoll"
                           : !strcmp(mode, "sharedtimerfd") ? "timerfd"
                           : !strcmp(mode, "sharedeventfd") ? "eventfd"
                                                            : "inotify";
        CHECK(readlink(p, link, sizeof link - 1) > 0 && strstr(link, want), "the %s is gone: '%s'", want, link);
        int queued = 0;
        CHECK(strcmp(mode, "inotifyqueued") || (ioctl(fd1, FIONREAD, &queued) == 0 && queued > 0),
              "the inotify event not yet read is gone");
    } else if (!strcmp(mode, "sharedfifo") || !strcmp(mode, "deletedfifo")) {
        struct stat a, b;
        CHECK(fstat(fd1, &a) == 0 && fstat(fd2, &b) == 0 && S_ISFIFO(a.st_mode) && a.st_ino == b.st_ino,
              "the named pipe is gone");
    } else if (!strcmp(mode, "sharedpipe")) {
        struct stat a, b;
        CHECK(fstat(fd1, &a) == 0 && fstat(fd2, &b) == 0 && S_ISFIFO(a.st_mode) && a.st_ino == b.st_ino, "the pipe is gone");
    } else if (!strcmp(mode, "seccomp-notify")) {
        errno = 0;
        long r = syscall(SYS_getpriority, 0, 0);
        CHECK(r == -1 && errno == ENOSYS, "getpriority returned %ld, errno %d: the filter is gone", r, errno);
    } else if (!strcmp(mode, "threadcreds")) {
        char path[64], line[256];
        int egid = -1;
        snprintf(path, sizeof path, "/proc/self/task/%d/status", creds_tid);
        FILE *f = fopen(path, "r");
        while (f && fgets(line, sizeof line, f))
            if (sscanf(line, "Gid: %*d %d", &egid) == 1) break;
        if (f) fclose(f);
        CHECK(egid == 65534 && getegid() != 65534, "the thread's effective group id is %d (process %d)", egid,
              (int)getegid());
    } else if (!strcmp(mode, "threadfs")) {
        char here[4096], there[4096], path[64];
        snprintf(path, sizeof path, "/proc/self/task/%d/cwd", fs_tid);
        ssize_t n = readlink(path, there, sizeof there - 1);
        CHECK(getcwd(here, sizeof here) && n == 1 && there[0] == '/' && strcmp(here, "/"),
              "the thread's own working directory is gone (process in %s, thread %zd bytes)", here, n);
    }
    return 1;
}

/* seccomp-notify: a filter that returns `action` for getpriority. */
static void filter_getpriority(unsigned action) {
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_getpriority, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, action),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof f / sizeof f[0], f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog))
        scn_die("seccomp(SET_MODE_FILTER)");
}

/* threadcreds: the thread with an effective group id of its own. */
static void *own_creds(void *arg) {
    (void)arg;
    if (syscall(SYS_setresgid, -1, 65534, -1) != 0) _exit(2);
    creds_tid = (int)syscall(SYS_gettid);
    for (;;) pause();
    return NULL;
}

/* threadfs: the thread with filesystem attributes of its own. */
static void *own_fs(void *arg) {
    (void)arg;
    if (unshare(CLONE_FS) != 0 || chdir("/") != 0) _exit(2);
    fs_tid = (int)syscall(SYS_gettid);
    for (;;) pause();
    return NULL;
}

int main(int argc, char **argv) {
    scn_name = "refuse";
    if (argc < 2) scn_die("usage: refuse MODE [ARGS]");
    mode = argv[1];
    if (!strcmp(mode, "socket")) {
        fd1 = socket(AF_UNIX, SOCK_DGRAM, 0);
        fd2 = socket(AF_INET, SOCK_STREAM, 0);
        if (fd1 < 0 || fd2 < 0) scn_die("socket");
        /* Named, it leads out of the process: one never connected and
         * unnamed would move (lonesock). */
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        int len = snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "pmig-refuse-%d", (int)getpid());
        if (bind(fd1, (struct sockaddr *)&a, (socklen_t)(sizeof(sa_family_t) + 1 + len))) scn_die("bind");
    } else if (!strcmp(mode, "child")) {
        pid_t parent = getpid();
        child = fork();
        if (child < 0) scn_die("fork");
        if (child == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent) _exit(0);
            for (;;) pause();
        }
    } else if (!strcmp(mode, "zombie")) {
        child = fork();
        if (child < 0) scn_die("fork");
        if (child == 0) _exit(7);
        /* Exited, not reaped: WNOWAIT leaves it waitable. */
        siginfo_t si;
        if (waitid(P_PID, child, &si, WEXITED | WNOWAIT)) scn_die("waitid");
    } else if (!strcmp(mode, "aliasedshm")) {
        shm = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (shm == MAP_FAILED) scn_die("mmap");
        view = mremap(shm, 0, 8192, MREMAP_MAYMOVE);
        if (view == MAP_FAILED) scn_die("mremap");
        split = mmap(NULL, 4 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (split == MAP_FAILED || mprotect(split + 4096, 4096, PROT_READ)) scn_die("split");
        split[0] = 'a';
        split[2 * 4096] = 'b';
    } else if (!strcmp(mode, "procfd")) {
        fd1 = open("/proc/self/status", O_RDONLY);
        if (fd1 < 0) scn_die("open /proc/self/status");
    } else if (!strcmp(mode, "sigio")) {
        int p[2];
        if (pipe(p)) scn_die("pipe");
        fd1 = p[0];
        fd2 = p[1];
        if (fcntl(fd1, F_SETOWN, getpid()) || fcntl(fd1, F_SETFL, fcntl(fd1, F_GETFL) | O_ASYNC))
            scn_die("O_ASYNC");
    } else if (!strcmp(mode, "iouring")) {
        uint32_t params[30] = {0};   /* struct io_uring_params is 120 bytes */
        fd1 = (int)syscall(425 /* io_uring_setup */, 4, params);
        if (fd1 < 0 && errno == ENOSYS) {
            scn_puts("SKIP io_uring: io_uring_setup returned ENOSYS (not in this kernel)\n");
            return 0;
        }
        if (fd1 < 0) scn_die("io_uring_setup");
        /* map the SQ ring: sq_off.array (params[10+6]) + entries * 4 */
        size_t sq_len = params[16] + params[0] * 4;
        if (mmap(NULL, sq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd1, 0) == MAP_FAILED) scn_die("mmap sq ring");
    } else if (!strcmp(mode, "sysvshm")) {
        if (argc < 4) scn_die("usage: refuse sysvshm SHMID SLOT");
        fd1 = atoi(argv[2]);
        slot = atoi(argv[3]) & 1;
        shm = shmat(fd1, NULL, 0);
        if (shm == (void *)-1) scn_die("shmat %d", fd1);
        scn_fill(shm + (size_t)slot * SHM_HALF, SHM_HALF, 50 + (uint64_t)slot);
    } else if (!strcmp(mode, "sharedflock") || !strcmp(mode, "waitedlock")) {
        fd1 = open("locked", O_RDWR | O_CREAT, 0600);
        if (fd1 < 0 || flock(fd1, LOCK_EX)) scn_die("lock");
        int waits = !strcmp(mode, "waitedlock");
        pid_t me = getpid();
        pid_t c = fork();
        if (c < 0) scn_die("fork");
        if (c == 0) {
            if (fork() == 0) {
                if (waits) {
                    /* Its own open file (not ours, which it let go):
                     * it waits until we are gone. */
                    close(fd1);
                    int w = open("locked", O_RDONLY);
                    _exit(w >= 0 && flock(w, LOCK_EX) == 0 ? 0 : 1);
                }
                struct pollfd p = {.fd = (int)syscall(SYS_pidfd_open, me, 0), .events = POLLIN};
                if (p.fd >= 0) poll(&p, 1, -1);
                _exit(0);
            }
            _exit(0);
        }
        if (waitpid(c, NULL, 0) != c) scn_die("waitpid");
        /* Ready only once the other process waits (bounded: 10 s). */
        for (int i = 0; waits && !waited_for(fd1); i++) {
            if (i == 10000) scn_die("the other process never waited for the lock");
            usleep(1000);
        }
    } else if (!strcmp(mode, "openedlock")) {
        fd1 = open("locked", O_RDWR | O_CREAT, 0600);
        if (fd1 < 0 || lockf(fd1, F_LOCK, 0)) scn_die("lock");
        pid_t me = getpid();
        pid_t c = fork();
        if (c < 0) scn_die("fork");
        if (c == 0) {
            if (fork() == 0) {
                /* Its own open file, no lock: it could ask for one. */
                close(fd1);
                int o = open("locked", O_RDONLY);
                struct pollfd p = {.fd = (int)syscall(SYS_pidfd_open, me, 0), .events = POLLIN};
                if (o >= 0 && p.fd >= 0) poll(&p, 1, -1);
                _exit(0);
            }
            _exit(0);
        }
        if (waitpid(c, NULL, 0) != c) scn_die("waitpid");
        /* Ready only once the other process has it open (bounded: 10 s). */
        for (int i = 0; !opened_elsewhere("locked"); i++) {
            if (i == 10000) scn_die("the other process never opened the file");
            usleep(1000);
        }
    } else if (!strcmp(mode, "lease")) {
        fd1 = open("leased", O_RDONLY | O_CREAT, 0600);
        if (fd1 < 0) scn_die("open leased");
        if (fcntl(fd1, F_SETLEASE, F_RDLCK)) scn_die("F_SETLEASE");
    } else if (!strcmp(mode, "mqueue")) {
        snprintf(mq_name, sizeof mq_name, "/pmig-refuse-%d", (int)getpid());
        fd1 = (int)syscall(SYS_mq_open, mq_name + 1, O_RDWR | O_CREAT, 0600, NULL);
        if (fd1 < 0) scn_die("mq_open %s", mq_name);
        if (atexit(unlink_mq)) scn_die("atexit");
    } else if (!strcmp(mode, "aio")) {
        unsigned long ctx = 0;
        if (syscall(SYS_io_setup, 4, &ctx)) scn_die("io_setup");
    } else if (!strcmp(mode, "seccomp-strict")) {
        if (atexit(exit_strict)) scn_die("atexit");
    } else if (!strcmp(mode, "sharedpipe")) {
        int p[2];
        if (pipe(p)) scn_die("pipe");
        fd1 = p[0];
        fd2 = p[1];
        pid_t c = fork();
        if (c < 0) scn_die("fork");
        if (c == 0) {
            if (fork() == 0) {
                char b;
                close(fd2);
                while (read(fd1, &b, 1) > 0) {}
                _exit(0);
            }
            _exit(0);
        }
        if (waitpid(c, NULL, 0) != c) scn_die("waitpid");
    } else if (!strcmp(mode, "sharedfifo") || !strcmp(mode, "deletedfifo")) {
        const char *name = !strcmp(mode, "sharedfifo") ? "shared.fifo" : "deleted.fifo";
        unlink(name);
        if (mkfifo(name, 0600)) scn_die("mkfifo %s", name);
        /* Read-write first: neither open then waits for the other end. */
        fd1 = open(name, O_RDWR);
        fd2 = open(name, O_WRONLY);
        if (fd1 < 0 || fd2 < 0) scn_die("open %s", name);
        if (!strcmp(mode, "deletedfifo")) {
            if (unlink(name)) scn_die("unlink %s", name);
        } else {
            if (atexit(unlink_fifo)) scn_die("atexit");
            /* The reader says on `sync` that it has the pipe open. */
            int sync[2];
            if (pipe(sync)) scn_die("pipe");
            pid_t c = fork();
            if (c < 0) scn_die("fork");
            if (c == 0) {
                if (fork() == 0) {
                    char b;
                    int rd = open(name, O_RDONLY);
                    close(fd1);
                    close(fd2);
                    close(sync[0]);
                    if (rd < 0 || write(sync[1], "x", 1) != 1) _exit(1);
                    close(sync[1]);
                    while (read(rd, &b, 1) > 0) {}
                    _exit(0);
                }
                _exit(0);
            }
            close(sync[1]);
            char x;
            if (waitpid(c, NULL, 0) != c) scn_die("waitpid");
            if (read(sync[0], &x, 1) != 1) scn_die("the other reader of %s did not start", name);
            close(sync[0]);
        }
    } else if (!strcmp(mode, "rdwrpipe")) {
        int p[2];
        char path[64];
        if (pipe(p)) scn_die("pipe");
        snprintf(path, sizeof path, "/proc/self/fd/%d", p[0]);
        fd1 = open(path, O_RDWR);
        if (fd1 < 0) scn_die("reopen the pipe read-write");
    } else if (!strcmp(mode, "inotifyqueued")) {
        fd1 = inotify_init1(0);
        if (fd1 < 0 || inotify_add_watch(fd1, ".", IN_CREATE | IN_DELETE) != 1) scn_die("inotify");
        int f = open("queued", O_CREAT | O_WRONLY, 0600);
        if (f < 0) scn_die("create");
        close(f);
        unlink("queued");
    } else if (!strcmp(mode, "sharedeventfd") || !strcmp(mode, "sharedepoll") || !strcmp(mode, "sharedtimerfd") ||
               !strcmp(mode, "sharedinotify")) {
        fd1 = !strcmp(mode, "sharedepoll")     ? epoll_create1(0)
              : !strcmp(mode, "sharedtimerfd") ? timerfd_create(CLOCK_MONOTONIC, 0)
              : !strcmp(mode, "sharedinotify") ? inotify_init1(0)
                                               : eventfd(7, 0);
        if (fd1 < 0) scn_die("create");
        pid_t me = getpid();
        pid_t c = fork();
        if (c < 0) scn_die("fork");
        if (c == 0) {
            if (fork() == 0) {
                struct pollfd p = {.fd = (int)syscall(SYS_pidfd_open, me, 0), .events = POLLIN};
                if (p.fd >= 0) poll(&p, 1, -1);
                _exit(0);
            }
            _exit(0);
        }
        if (waitpid(c, NULL, 0) != c) scn_die("waitpid");
    } else if (!strcmp(mode, "threadfs")) {
        pthread_t t;
        if (pthread_create(&t, NULL, own_fs, NULL) != 0) scn_die("pthread_create");
        for (int i = 0; i < 1000 && !fs_tid; i++) usleep(1000);
        if (!fs_tid) scn_die("the thread did not start");
    } else if (!strcmp(mode, "threadcreds")) {
        pthread_t t;
        if (pthread_create(&t, NULL, own_creds, NULL) != 0) scn_die("pthread_create");
        for (int i = 0; i < 1000 && !creds_tid; i++) usleep(1000);
        if (!creds_tid) scn_die("the thread did not start");
    } else if (!strcmp(mode, "seccomp-notify")) {
        filter_getpriority(SECCOMP_RET_USER_NOTIF);
    } else if (strcmp(mode, "plain")) {
        scn_die("unknown mode %s", mode);
    }
    scn_run(check, NULL);
}
