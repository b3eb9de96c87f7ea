/* socketpair: unix socket pairs the process holds alone (the way asyncio
 * wakes its event loop), checked without consuming them:
 *   stream   40 KiB queued one way (read end O_NONBLOCK, dup'ed onto fd 41,
 *            watched by an epoll for input), "pong" the other way;
 *   dgram    three messages queued, one of them empty, in order (the
 *            check takes them and sends them again); a send buffer of
 *            its own (SO_SNDBUF) on one end;
 *   seqpacket two messages queued, a peek offset (SO_PEEK_OFF) on the
 *            reading end;
 *   closed   a stream pair whose one end sent "bye" and shut down its
 *            sending side, the other end its own: one reads "bye", then
 *            end-of-file, neither may send;
 * each end at the same fd number, the two ends of each pair still
 * connected to each other. */
#include "common.h"
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>

#define STREAM_BYTES (40 * 1024)
#define DUP_FD 41
#define DGRAM_SNDBUF 50000
#define PEEK_OFF 3

static int st[2], dg[2], sp[2], cl[2], ep;
static unsigned char stream_data[STREAM_BYTES];
static const char *dgram_msgs[] = {"alpha", "", "gamma and delta"};
static const char *seq_msgs[] = {"first packet", "second"};

static ino_t ino(int fd) {
    struct stat s;
    return fstat(fd, &s) ? 0 : s.st_ino;
}

static int opt(int fd, int o) {
    int v = -2;
    socklen_t l = sizeof v;
    return getsockopt(fd, SOL_SOCKET, o, &v, &l) ? -2 : v;
}

/* The messages queued at `fd`, peeked from offset 0 and left in place
 * (the socket's own peek offset, if any, is put back). Returns how many,
 * each length in lens[] and the bytes back to back in buf. */
static int peek_all(int fd, unsigned char *buf, size_t cap, size_t *lens, int max) {
    int saved = opt(fd, SO_PEEK_OFF), zero = 0, n = 0;
    size_t at = 0;
    if (setsockopt(fd, SOL_SOCKET, SO_PEEK_OFF, &zero, sizeof zero)) return -1;
    while (n < max && at < cap) {
        ssize_t k = recv(fd, buf + at, cap - at, MSG_PEEK | MSG_DONTWAIT);
        if (k < 0) break;
        lens[n++] = (size_t)k;
        at += (size_t)k;
        int type = 0;
        socklen_t l = sizeof type;
        getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l);
        if (k == 0 && type == SOCK_STREAM) break; /* end of stream */
    }
    setsockopt(fd, SOL_SOCKET, SO_PEEK_OFF, &saved, sizeof saved);
    return n;
}

static int check(void) {
    static unsigned char buf[STREAM_BYTES + 64];
    size_t lens[16];
    int n, q = -1;

    /* stream */
    CHECK(ioctl(st[1], FIONREAD, &q) == 0 && q == STREAM_BYTES, "stream holds %d bytes, want %d", q, STREAM_BYTES);
    n = peek_all(st[1], buf, sizeof buf, lens, 16);
    size_t total = 0;
    for (int i = 0; i < n; i++) total += lens[i];
    CHECK(total == STREAM_BYTES && memcmp(buf, stream_data, STREAM_BYTES) == 0, "the stream's data changed (%zu bytes)", total);
    n = peek_all(st[0], buf, sizeof buf, lens, 16);
    CHECK(n == 1 && lens[0] == 4 && memcmp(buf, "pong", 4) == 0, "the stream's other way holds %d chunks", n);
    int fl = fcntl(st[1], F_GETFL), f0 = fcntl(st[0], F_GETFL);
    CHECK(fl >= 0 && (fl & O_NONBLOCK), "stream reading end flags %#x", fl);
    CHECK(f0 >= 0 && !(f0 & O_NONBLOCK), "stream writing end flags %#x", f0);
    CHECK(ino(DUP_FD) == ino(st[1]), "fd %d is no longer the stream's reading end", DUP_FD);
    CHECK(fcntl(st[1], F_SETFL, fl & ~O_NONBLOCK) == 0, "F_SETFL");
    int fd2 = fcntl(DUP_FD, F_GETFL);
    CHECK(fcntl(st[1], F_SETFL, fl) == 0, "F_SETFL back");
    CHECK(fd2 >= 0 && !(fd2 & O_NONBLOCK), "fd %d does not share the stream end's open file description", DUP_FD);
    struct epoll_event ev[2];
    int ready = epoll_wait(ep, ev, 2, 0);
    CHECK(ready == 1 && ev[0].data.u32 == 7 && (ev[0].events & EPOLLIN), "epoll: %d ready", ready);
    int type = 0;
    socklen_t tl = sizeof type;
    CHECK(getsockopt(st[0], SOL_SOCKET, SO_TYPE, &type, &tl) == 0 && type == SOCK_STREAM, "stream type %d", type);

    /* dgram: taken off the queue and sent again in order (an empty
     * message, once peeked, hides from a peek at an offset) */
    n = 0;
    size_t at = 0;
    for (; n < 16; n++) {
        ssize_t k = recv(dg[1], buf + at, sizeof buf - at, MSG_DONTWAIT);
        if (k < 0) break;
        lens[n] = (size_t)k;
        at += (size_t)k;
    }
    at = 0;
    for (int i = 0; i < n; i++) {
        CHECK(send(dg[0], buf + at, lens[i], MSG_DONTWAIT) == (ssize_t)lens[i], "send a dgram message back: %s", strerror(errno));
        at += lens[i];
    }
    CHECK(n == 3, "dgram holds %d messages, want 3", n);
    at = 0;
    for (int i = 0; i < 3; i++) {
        size_t l = strlen(dgram_msgs[i]);
        CHECK(lens[i] == l && memcmp(buf + at, dgram_msgs[i], l) == 0, "dgram message %d changed", i);
        at += l;
    }
    CHECK(peek_all(dg[0], buf, sizeof buf, lens, 16) == 0, "the dgram's other way holds messages");
    CHECK(opt(dg[0], SO_SNDBUF) == 2 * DGRAM_SNDBUF, "dgram SO_SNDBUF %d, want %d", opt(dg[0], SO_SNDBUF), 2 * DGRAM_SNDBUF);
    tl = sizeof type;
    CHECK(getsockopt(dg[1], SOL_SOCKET, SO_TYPE, &type, &tl) == 0 && type == SOCK_DGRAM, "dgram type %d", type);

    /* seqpacket */
    CHECK(opt(sp[1], SO_PEEK_OFF) == PEEK_OFF, "seqpacket SO_PEEK_OFF %d, want %d", opt(sp[1], SO_PEEK_OFF), PEEK_OFF);
    n = peek_all(sp[1], buf, sizeof buf, lens, 16);
    CHECK(n == 2, "seqpacket holds %d messages, want 2", n);
    CHECK(lens[0] == strlen(seq_msgs[0]) && memcmp(buf, seq_msgs[0], lens[0]) == 0, "seqpacket message 0 changed");
    CHECK(lens[1] == strlen(seq_msgs[1]) && memcmp(buf + lens[0], seq_msgs[1], lens[1]) == 0, "seqpacket message 1 changed");
    CHECK(opt(sp[1], SO_PEEK_OFF) == PEEK_OFF, "seqpacket SO_PEEK_OFF not put back");

    /* closed */
    n = peek_all(cl[1], buf, sizeof buf, lens, 16);
    CHECK(n == 2 && lens[0] == 3 && memcmp(buf, "bye", 3) == 0 && lens[1] == 0, "closed pair: %d chunks, want \"bye\" then end-of-file", n);
    /* Both ends shut down their sending sides. */
    CHECK(send(cl[0], "z", 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 && errno == EPIPE, "closed pair: the end that said bye can still send");
    CHECK(send(cl[1], "z", 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 && errno == EPIPE, "closed pair: the other end can still send");
    CHECK(ioctl(cl[0], FIONREAD, &q) == 0 && q == 0, "closed pair: %d bytes queued at the end that said bye", q);

    /* Each pair is still one pair. */
    CHECK(ino(st[0]) != ino(st[1]), "stream ends are one socket");
    return 1;
}

int main(void) {
    scn_name = "socketpair";
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, st)) scn_die("socketpair stream");
    scn_fill(stream_data, STREAM_BYTES, 31);
    if (write(st[0], stream_data, STREAM_BYTES) != STREAM_BYTES) scn_die("fill the stream");
    if (write(st[1], "pong", 4) != 4) scn_die("pong");
    if (fcntl(st[1], F_SETFL, O_NONBLOCK)) scn_die("O_NONBLOCK");
    if (dup2(st[1], DUP_FD) != DUP_FD) scn_die("dup2");
    ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event e = {.events = EPOLLIN, .data.u32 = 7};
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, st[1], &e)) scn_die("epoll");

    if (socketpair(AF_UNIX, SOCK_DGRAM, 0, dg)) scn_die("socketpair dgram");
    int sb = DGRAM_SNDBUF;
    if (setsockopt(dg[0], SOL_SOCKET, SO_SNDBUF, &sb, sizeof sb)) scn_die("SO_SNDBUF");
    for (int i = 0; i < 3; i++)
        if (send(dg[0], dgram_msgs[i], strlen(dgram_msgs[i]), 0) != (ssize_t)strlen(dgram_msgs[i])) scn_die("send dgram");

    if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sp)) scn_die("socketpair seqpacket");
    for (int i = 0; i < 2; i++)
        if (send(sp[0], seq_msgs[i], strlen(seq_msgs[i]), 0) != (ssize_t)strlen(seq_msgs[i])) scn_die("send seqpacket");
    int po = PEEK_OFF;
    if (setsockopt(sp[1], SOL_SOCKET, SO_PEEK_OFF, &po, sizeof po)) scn_die("SO_PEEK_OFF");

    if (socketpair(AF_UNIX, SOCK_STREAM, 0, cl)) scn_die("socketpair closed");
    if (write(cl[0], "bye", 3) != 3 || shutdown(cl[0], SHUT_WR)) scn_die("bye");
    /* The other end shut down its sending side too. */
    if (shutdown(cl[1], SHUT_WR)) scn_die("shutdown");
    scn_run(check, NULL);
}
