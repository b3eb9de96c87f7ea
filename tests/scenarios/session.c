/* session: a job as `pmig run` starts it: session leader, a pty slave as
 * stdio and controlling terminal, in the terminal's foreground, with a
 * SIGINT handler and its own terminal modes (no echo, no output processing,
 * canonical input with signals).
 *
 * Modes (argv[1]):
 *   (none)   started by the test as described above; commands:
 *            "check"  -> session leader (getsid(0) == getpid() == getpgrp()),
 *                        isatty(0..2), fd 0 is the controlling terminal
 *                        (TIOCGSID), tcgetpgrp(0) == getpgrp(), /dev/tty
 *                        opens, the terminal modes are the ones set at start;
 *            "notty"  -> the checks for a restore without a terminal: still a
 *                        session leader, no controlling terminal (/dev/tty
 *                        fails with ENXIO), stdio not a terminal;
 *            "sigints"-> "SIGINTS <n>", the number of SIGINTs received.
 *            Each SIGINT is also announced by the handler: "SIGINT received".
 *   member   a session leader (stdio pipes) with another process in its
 *            session that is not its child (a grandchild whose parent has
 *            exited): pmig must refuse it. That process exits when this one
 *            does. "check" -> still the session leader. */
#include "common.h"
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>

static volatile sig_atomic_t sigints;
static struct termios modes;

static void on_sigint(int sig) {
    (void)sig;
    sigints++;
    static const char msg[] = "SIGINT received\n";
    ssize_t w = write(1, msg, sizeof msg - 1);
    (void)w;
}

static int leader(void) {
    pid_t me = getpid();
    CHECK(getsid(0) == me, "getsid(0) = %d, want pid %d", (int)getsid(0), (int)me);
    CHECK(getpgrp() == me, "getpgrp() = %d, want pid %d", (int)getpgrp(), (int)me);
    return 1;
}

static int check_tty(void) {
    if (!leader()) return 0;
    for (int fd = 0; fd < 3; fd++) CHECK(isatty(fd), "fd %d is not a terminal", fd);
    pid_t sid = -1;
    CHECK(ioctl(0, TIOCGSID, &sid) == 0, "fd 0 is not the controlling terminal (TIOCGSID: %s)", strerror(errno));
    CHECK(sid == getpid(), "the terminal's session is %d, want %d", (int)sid, (int)getpid());
    pid_t fg = tcgetpgrp(0);
    CHECK(fg == getpgrp(), "tcgetpgrp(0) = %d (%s), want %d", (int)fg, fg < 0 ? strerror(errno) : "", (int)getpgrp());
    int t = open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC);
    CHECK(t >= 0, "open /dev/tty: %s", strerror(errno));
    close(t);
    struct termios now;
    CHECK(tcgetattr(0, &now) == 0, "tcgetattr: %s", strerror(errno));
    CHECK(now.c_lflag == modes.c_lflag && now.c_oflag == modes.c_oflag && now.c_iflag == modes.c_iflag,
          "terminal modes lflag %#x oflag %#x iflag %#x, want %#x %#x %#x", now.c_lflag, now.c_oflag, now.c_iflag,
          modes.c_lflag, modes.c_oflag, modes.c_iflag);
    CHECK(now.c_cc[VINTR] == modes.c_cc[VINTR], "VINTR %#x, want %#x", now.c_cc[VINTR], modes.c_cc[VINTR]);
    return 1;
}

static int check_notty(void) {
    if (!leader()) return 0;
    for (int fd = 0; fd < 3; fd++) CHECK(!isatty(fd), "fd %d is a terminal", fd);
    int t = open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC);
    int e = errno;
    if (t >= 0) close(t);
    CHECK(t < 0 && e == ENXIO, "open /dev/tty: %s, want ENXIO (no controlling terminal)", t >= 0 ? "succeeded" : strerror(e));
    return 1;
}

/* The command loop (like scn_run, with this scenario's commands). */
__attribute__((noreturn)) static void run(int member) {
    static char line[256];
    size_t len = 0;
    scn_puts("READY\n");
    for (;;) {
        char *nl = memchr(line, '\n', len);
        if (!nl) {
            if (len == sizeof line) len = 0;
            ssize_t r = read(0, line + len, sizeof line - len);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) exit(scn_any_failed ? 1 : 0);
            len += (size_t)r;
            continue;
        }
        *nl = 0;
        if (nl > line && nl[-1] == '\r') nl[-1] = 0;
        char out[1200];
        int ok = -1;
        if (strcmp(line, "check") == 0) {
            scn_reason[0] = 0;
            ok = member ? leader() : check_tty();
        } else if (strcmp(line, "notty") == 0) {
            scn_reason[0] = 0;
            ok = check_notty();
        } else if (strcmp(line, "sigints") == 0) {
            snprintf(out, sizeof out, "SIGINTS %d\n", (int)sigints);
            scn_puts(out);
        } else if (strcmp(line, "quit") == 0) {
            exit(scn_any_failed ? 1 : 0);
        } else if (line[0]) {
            scn_any_failed = 1;
            snprintf(out, sizeof out, "FAIL %s: unknown command '%.100s'\n", scn_name, line);
            scn_puts(out);
        }
        if (ok == 1) {
            snprintf(out, sizeof out, "PASS %s\n", scn_name);
            scn_puts(out);
        } else if (ok == 0) {
            scn_any_failed = 1;
            snprintf(out, sizeof out, "FAIL %s: %s\n", scn_name, scn_reason[0] ? scn_reason : "?");
            scn_puts(out);
        }
        size_t used = (size_t)(nl - line) + 1;
        memmove(line, nl + 1, len - used);
        len -= used;
    }
}

/* Start a process in our session that is not our child: fork a child that
 * forks a grandchild and exits. The grandchild lives until we are gone. */
static void leave_a_session_member(void) {
    pid_t parent = getpid();
    pid_t c = fork();
    if (c < 0) scn_die("fork");
    if (c == 0) {
        pid_t g = fork();
        if (g < 0) _exit(2);
        if (g == 0) {
            int pfd = (int)syscall(SYS_pidfd_open, parent, 0);
            int null = open("/dev/null", O_RDWR);
            if (null >= 0) {
                dup2(null, 0);
                dup2(null, 1);
                dup2(null, 2);
            }
            if (pfd < 0) _exit(3);
            struct pollfd p = {pfd, POLLIN, 0};
            poll(&p, 1, 600 * 1000); /* bounded: ten minutes at most */
            _exit(0);
        }
        _exit(0);
    }
    int st;
    if (waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0) scn_die("intermediate child");
}

int main(int argc, char **argv) {
    scn_name = "session";
    int member = argc > 1 && strcmp(argv[1], "member") == 0;
    if (getsid(0) != getpid()) scn_die("not started as a session leader");
    if (member) {
        leave_a_session_member();
        run(1);
    }
    if (!isatty(0) || tcgetpgrp(0) != getpgrp()) scn_die("stdin is not the controlling terminal, in the foreground");
    if (tcgetattr(0, &modes)) scn_die("tcgetattr");
    modes.c_lflag &= ~(tcflag_t)(ECHO | ECHOE | ECHOK | ECHONL | ECHOCTL);
    modes.c_lflag |= ICANON | ISIG;
    modes.c_oflag &= ~(tcflag_t)OPOST;
    modes.c_iflag &= ~(tcflag_t)(ICRNL | IXON);
    modes.c_cc[VINTR] = 3;
    if (tcsetattr(0, TCSANOW, &modes)) scn_die("tcsetattr");
    if (tcgetattr(0, &modes)) scn_die("tcgetattr");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGINT, &sa, NULL)) scn_die("sigaction");
    run(0);
}
