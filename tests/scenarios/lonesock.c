/* lonesock: unix sockets with no name and no live peer, checked without
 * consuming what they hold:
 *   preclose  a stream pair whose second end was closed at once, as Java
 *             keeps one (dup'ed onto fd 42 too): end-of-file, EPIPE;
 *   words     a stream whose peer wrote "last words" and closed: the
 *             bytes, then end-of-file; a peek offset of its own;
 *   reset     a stream whose peer closed with bytes of ours unread:
 *             ECONNRESET pending (POLLERR), left in place;
 *   seq       a seqpacket pair, one end closed: end-of-file, EPIPE;
 *   dgram     a datagram pair, one end closed: still names its peer
 *             (getpeername), nothing queued;
 *   fresh     a stream socket never connected, its send buffer set;
 *   freshdg   a datagram socket never connected, non-blocking;
 * each at the same fd number, and none of them connected to another. */
#include "common.h"
#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#define DUP_FD 42
#define PEEK_OFF 4
#define FRESH_SNDBUF 70000

static int preclose, words, reset, seq, dgram, fresh, freshdg;

static int opt(int fd, int o) {
    int v = -2;
    socklen_t l = sizeof v;
    return getsockopt(fd, SOL_SOCKET, o, &v, &l) ? -2 : v;
}

static ino_t ino(int fd) {
    struct stat s;
    return fstat(fd, &s) ? 0 : s.st_ino;
}

static short revents(int fd) {
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLOUT};
    return poll(&p, 1, 0) < 0 ? -1 : p.revents;
}

/* What a stream end holds, peeked from offset 0 (its own peek offset put
 * back); -1 on an error. */
static ssize_t peek_stream(int fd, char *buf, size_t cap) {
    int saved = opt(fd, SO_PEEK_OFF), zero = 0;
    if (setsockopt(fd, SOL_SOCKET, SO_PEEK_OFF, &zero, sizeof zero)) return -1;
    ssize_t n = recv(fd, buf, cap, MSG_PEEK | MSG_DONTWAIT);
    setsockopt(fd, SOL_SOCKET, SO_PEEK_OFF, &saved, sizeof saved);
    return n;
}

/* A peer address: 0 if it names one, else errno. */
static int peer_of(int fd) {
    struct sockaddr_un a;
    socklen_t l = sizeof a;
    return getpeername(fd, (struct sockaddr *)&a, &l) ? errno : 0;
}

static int check(void) {
    char buf[64];
    int type = 0;
    socklen_t tl;

    /* preclose */
    CHECK(ino(DUP_FD) == ino(preclose), "fd %d is no longer the pre-close socket", DUP_FD);
    CHECK(peek_stream(preclose, buf, sizeof buf) == 0, "preclose: no end-of-file");
    CHECK(send(preclose, "z", 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 && errno == EPIPE, "preclose: send gives %s, want EPIPE", strerror(errno));
    CHECK(!(revents(preclose) & POLLERR) && (revents(preclose) & POLLHUP), "preclose: poll %#x", revents(preclose));
    CHECK(peer_of(preclose) == 0, "preclose: no longer names its peer (%s)", strerror(peer_of(preclose)));

    /* words */
    ssize_t n = peek_stream(words, buf, sizeof buf);
    CHECK(n == 10 && !memcmp(buf, "last words", 10), "words: %zd bytes queued, want \"last words\"", n);
    int q = -1;
    CHECK(ioctl(words, FIONREAD, &q) == 0 && q == 10, "words: FIONREAD %d", q);
    CHECK(opt(words, SO_PEEK_OFF) == PEEK_OFF, "words: SO_PEEK_OFF %d, want %d", opt(words, SO_PEEK_OFF), PEEK_OFF);
    n = recv(words, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
    /* (The peek moved the offset on.) */
    int po = PEEK_OFF;
    CHECK(setsockopt(words, SOL_SOCKET, SO_PEEK_OFF, &po, sizeof po) == 0, "words: set SO_PEEK_OFF back");
    CHECK(n == 6 && !memcmp(buf, " words", 6), "words: a peek from its offset gives %zd bytes", n);
    CHECK(send(words, "z", 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 && errno == EPIPE, "words: send gives %s", strerror(errno));

    /* reset: the error stays pending until a read takes it */
    short r = revents(reset);
    CHECK(r > 0 && (r & POLLERR), "reset: poll %#x, no error pending", r);

    /* seq */
    tl = sizeof type;
    CHECK(getsockopt(seq, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 && type == SOCK_SEQPACKET, "seq: type %d", type);
    CHECK(recv(seq, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT) == 0, "seq: no end-of-file");
    CHECK(send(seq, "z", 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 && errno == EPIPE, "seq: send gives %s", strerror(errno));

    /* dgram */
    tl = sizeof type;
    CHECK(getsockopt(dgram, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 && type == SOCK_DGRAM, "dgram: type %d", type);
    CHECK(peer_of(dgram) == 0, "dgram: no longer names its peer (%s)", strerror(peer_of(dgram)));
    CHECK(recv(dgram, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT) < 0 && errno == EAGAIN, "dgram: a message queued");

    /* fresh */
    tl = sizeof type;
    CHECK(getsockopt(fresh, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 && type == SOCK_STREAM, "fresh: type %d", type);
    CHECK(opt(fresh, SO_SNDBUF) == 2 * FRESH_SNDBUF, "fresh: SO_SNDBUF %d", opt(fresh, SO_SNDBUF));
    CHECK(peer_of(fresh) == ENOTCONN, "fresh: connected");
    struct sockaddr_un own;
    socklen_t ol = sizeof own;
    CHECK(getsockname(fresh, (struct sockaddr *)&own, &ol) == 0 && ol == sizeof(sa_family_t), "fresh: bound to a name");

    /* freshdg */
    int fl = fcntl(freshdg, F_GETFL);
    CHECK(fl >= 0 && (fl & O_NONBLOCK), "freshdg: flags %#x", fl);
    CHECK(peer_of(freshdg) == ENOTCONN, "freshdg: connected");
    CHECK(recv(freshdg, buf, sizeof buf, MSG_PEEK) < 0 && errno == EAGAIN, "freshdg: a message queued");
    return 1;
}

static int closed_pair(int type, const char *theirs, const char *ours) {
    int sv[2];
    if (socketpair(AF_UNIX, type, 0, sv)) scn_die("socketpair");
    if (theirs && send(sv[1], theirs, strlen(theirs), 0) != (ssize_t)strlen(theirs)) scn_die("send theirs");
    if (ours && send(sv[0], ours, strlen(ours), 0) != (ssize_t)strlen(ours)) scn_die("send ours");
    close(sv[1]);
    return sv[0];
}

int main(void) {
    scn_name = "lonesock";
    preclose = closed_pair(SOCK_STREAM, NULL, NULL);
    if (dup2(preclose, DUP_FD) != DUP_FD) scn_die("dup2");
    words = closed_pair(SOCK_STREAM, "last words", NULL);
    int po = PEEK_OFF;
    if (setsockopt(words, SOL_SOCKET, SO_PEEK_OFF, &po, sizeof po)) scn_die("SO_PEEK_OFF");
    reset = closed_pair(SOCK_STREAM, NULL, "never read");
    seq = closed_pair(SOCK_SEQPACKET, NULL, NULL);
    dgram = closed_pair(SOCK_DGRAM, NULL, NULL);
    fresh = socket(AF_UNIX, SOCK_STREAM, 0);
    int sb = FRESH_SNDBUF;
    if (fresh < 0 || setsockopt(fresh, SOL_SOCKET, SO_SNDBUF, &sb, sizeof sb)) scn_die("fresh");
    freshdg = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    if (freshdg < 0) scn_die("freshdg");
    scn_run(check, NULL);
}
