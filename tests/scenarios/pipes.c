/* pipes: pipes the process holds alone, checked without consuming them:
 *   self   a self-pipe with 100 KiB buffered (more than the default 64 KiB
 *          capacity: its capacity is 1 MiB), read end O_NONBLOCK and
 *          dup'ed onto fd 40 (one open file description), write end blocking;
 *   eof    3 bytes buffered, write end closed: the reader sees the bytes,
 *          then end-of-file (POLLHUP);
 *   epipe  read end closed: writing fails (POLLERR);
 * and all of them at the same fd numbers. */
#include "common.h"
#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

#define SELF_BYTES (100 * 1024)
#define SELF_CAP (1 << 20)
#define DUP_FD 40

static int self_r, self_w, eof_r, epipe_w;
static unsigned char self_data[SELF_BYTES];

/* The bytes buffered in the pipe read through `fd`, copied with tee. */
static int peek(int fd, unsigned char *buf, size_t want) {
    int p[2];
    CHECK(pipe2(p, O_CLOEXEC) == 0, "pipe2: %s", strerror(errno));
    if (fcntl(p[1], F_SETPIPE_SZ, SELF_CAP) < 0) {
        close(p[0]);
        close(p[1]);
        return scn_fail("size the peek pipe: %s", strerror(errno));
    }
    ssize_t n = tee(fd, p[1], want, SPLICE_F_NONBLOCK);
    int ok = n == (ssize_t)want;
    size_t got = 0;
    while (ok && got < want) {
        ssize_t k = read(p[0], buf + got, want - got);
        if (k <= 0) ok = 0;
        else got += (size_t)k;
    }
    close(p[0]);
    close(p[1]);
    CHECK(ok, "tee of %zu buffered bytes gave %zd (%s)", want, n, strerror(errno));
    return 1;
}

static ino_t ino(int fd) {
    struct stat st;
    return fstat(fd, &st) ? 0 : st.st_ino;
}

static int check(void) {
    static unsigned char buf[SELF_BYTES];
    int q = -1;
    CHECK(ioctl(self_r, FIONREAD, &q) == 0 && q == SELF_BYTES, "self-pipe holds %d bytes, want %d", q, SELF_BYTES);
    int cap = fcntl(self_w, F_GETPIPE_SZ);
    CHECK(cap == SELF_CAP, "self-pipe capacity %d, want %d", cap, SELF_CAP);
    if (!peek(self_r, buf, SELF_BYTES)) return 0;
    CHECK(memcmp(buf, self_data, SELF_BYTES) == 0, "the self-pipe's data changed");
    CHECK(ino(self_r) && ino(self_r) == ino(self_w), "the self-pipe's ends are different pipes");
    CHECK(ino(DUP_FD) == ino(self_r), "fd %d is no longer the self-pipe's read end", DUP_FD);
    int fl = fcntl(self_r, F_GETFL), fw = fcntl(self_w, F_GETFL), fd2 = fcntl(DUP_FD, F_GETFL);
    CHECK(fl >= 0 && (fl & O_NONBLOCK) && (fl & O_ACCMODE) == O_RDONLY, "self-pipe read end flags %#x", fl);
    CHECK(fw >= 0 && !(fw & O_NONBLOCK) && (fw & O_ACCMODE) == O_WRONLY, "self-pipe write end flags %#x", fw);
    /* One open file description: a flag set through one fd shows on the other. */
    CHECK(fcntl(self_r, F_SETFL, fl & ~O_NONBLOCK) == 0, "F_SETFL");
    fd2 = fcntl(DUP_FD, F_GETFL);
    CHECK(fcntl(self_r, F_SETFL, fl) == 0, "F_SETFL back");
    CHECK(fd2 >= 0 && !(fd2 & O_NONBLOCK), "fd %d does not share the read end's open file description", DUP_FD);

    CHECK(ioctl(eof_r, FIONREAD, &q) == 0 && q == 3, "eof pipe holds %d bytes, want 3", q);
    if (!peek(eof_r, buf, 3)) return 0;
    CHECK(memcmp(buf, "end", 3) == 0, "eof pipe data %.3s, want \"end\"", buf);
    struct pollfd p[2] = {{.fd = eof_r, .events = POLLIN}, {.fd = epipe_w, .events = POLLOUT}};
    CHECK(poll(p, 2, 0) == 2, "poll: %s", strerror(errno));
    CHECK((p[0].revents & (POLLIN | POLLHUP)) == (POLLIN | POLLHUP), "eof pipe: revents %#x, want data and no writer", p[0].revents);
    CHECK(p[1].revents & POLLERR, "epipe pipe: revents %#x, want no reader (POLLERR)", p[1].revents);
    return 1;
}

int main(void) {
    scn_name = "pipes";
    int p[2];
    if (pipe(p)) scn_die("pipe");
    self_r = p[0];
    self_w = p[1];
    if (fcntl(self_w, F_SETPIPE_SZ, SELF_CAP) < 0) scn_die("F_SETPIPE_SZ");
    scn_fill(self_data, SELF_BYTES, 77);
    if (write(self_w, self_data, SELF_BYTES) != SELF_BYTES) scn_die("fill the self-pipe");
    if (fcntl(self_r, F_SETFL, O_NONBLOCK)) scn_die("O_NONBLOCK");
    if (dup2(self_r, DUP_FD) != DUP_FD) scn_die("dup2");
    if (pipe(p)) scn_die("pipe");
    eof_r = p[0];
    if (write(p[1], "end", 3) != 3) scn_die("fill the eof pipe");
    close(p[1]);
    if (pipe(p)) scn_die("pipe");
    epipe_w = p[1];
    close(p[0]);
    scn_run(check, NULL);
}
