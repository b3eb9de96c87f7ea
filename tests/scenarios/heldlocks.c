/* heldlocks: file locks of every kind, held throughout, on files of its
 * working directory:
 *   a   POSIX write lock of bytes 0-99 and POSIX read lock from byte 200
 *       to the end, taken through one descriptor; a second descriptor of
 *       the same file is open too (the process owns POSIX locks, not its
 *       descriptors)
 *   b   open-file-description write lock of bytes 10-19
 *   c   flock shared lock, its descriptor duplicated onto fd 40 (one open
 *       file, one lock)
 *   d   flock exclusive lock
 *
 * check: asks the kernel, through descriptors of its own opened for the
 * purpose (each another open file, so its questions conflict with the
 * locks held), that each lock is held with its kind and range, and that nothing
 * else is locked. A restore that dropped a lock, or took one too many or
 * too wide, fails here. */
#include "common.h"
#include <sys/file.h>

static int a, a2, b, c, d;
/* The descriptors it asks through, one more open file of each: opened
 * once and never closed, since closing any descriptor of a file lets go
 * of the POSIX locks the process holds on it. */
static int pa, pb, pc, pd;

/* What an open-file-description lock query of `type` over [start, start +
 * len) through `p` meets: the conflicting lock's type (F_UNLCK when none)
 * and its pid in *pid. */
static int meets(int p, short type, off_t start, off_t len, pid_t *pid) {
    struct flock q = {.l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len};
    if (fcntl(p, F_OFD_GETLK, &q) != 0) return -1;
    if (pid) *pid = q.l_pid;
    return q.l_type;
}

/* Whether an flock of `op` through `p` is granted (and then let go
 * again). */
static int flock_granted(int p, int op) {
    if (flock(p, op | LOCK_NB) != 0) return errno == EWOULDBLOCK ? 0 : -1;
    return flock(p, LOCK_UN) == 0 ? 1 : -1;
}

static int check(void) {
    pid_t me = getpid(), who = 0;
    /* a: the write lock, owned by this process. */
    CHECK(meets(pa, F_RDLCK, 0, 1, &who) == F_WRLCK && who == me,
          "a: byte 0 is not write-locked by us (pid %d, %d)", (int)who, (int)me);
    CHECK(meets(pa, F_RDLCK, 99, 1, &who) == F_WRLCK, "a: byte 99 is not write-locked");
    /* Nothing between the two ranges. */
    CHECK(meets(pa, F_WRLCK, 100, 100, NULL) == F_UNLCK, "a: bytes 100-199 are locked");
    /* The read lock: a reader passes, a writer meets it, far past the end. */
    CHECK(meets(pa, F_RDLCK, 200, 0, NULL) == F_UNLCK, "a: a read lock from 200 is refused");
    CHECK(meets(pa, F_WRLCK, 1 << 30, 1, &who) == F_RDLCK && who == me,
          "a: byte 2^30 is not read-locked by us");
    /* b: bytes 10-19 only, owned by an open file (its pid is -1). */
    CHECK(meets(pb, F_RDLCK, 10, 10, &who) == F_WRLCK && who == -1,
          "b: bytes 10-19 are not OFD-write-locked (pid %d)", (int)who);
    CHECK(meets(pb, F_WRLCK, 0, 10, NULL) == F_UNLCK, "b: bytes 0-9 are locked");
    CHECK(meets(pb, F_WRLCK, 20, 0, NULL) == F_UNLCK, "b: bytes from 20 are locked");
    /* c: shared; d: exclusive. */
    CHECK(flock_granted(pc, LOCK_SH) == 1, "c: a shared flock is refused");
    CHECK(flock_granted(pc, LOCK_EX) == 0, "c: an exclusive flock is granted (c is not locked)");
    CHECK(flock_granted(pd, LOCK_SH) == 0, "d: a shared flock is granted (d is not locked)");
    /* The descriptors are still those that hold them. */
    CHECK(fcntl(a2, F_GETFD) >= 0 && fcntl(40, F_GETFD) >= 0, "a descriptor is gone");
    return 1;
}

static int opened(const char *path) {
    int fd = open(path, O_RDWR | O_CREAT, 0600);
    if (fd < 0) scn_die("open %s", path);
    return fd;
}

static void setlk(int fd, int cmd, short type, off_t start, off_t len) {
    struct flock l = {.l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len};
    if (fcntl(fd, cmd, &l) != 0) scn_die("lock");
}

int main(void) {
    scn_name = "heldlocks";
    a = opened("a");
    a2 = opened("a");
    b = opened("b");
    c = opened("c");
    d = opened("d");
    pa = opened("a");
    pb = opened("b");
    pc = opened("c");
    pd = opened("d");
    setlk(a, F_SETLK, F_WRLCK, 0, 100);
    setlk(a, F_SETLK, F_RDLCK, 200, 0);
    setlk(b, F_OFD_SETLK, F_WRLCK, 10, 10);
    if (flock(c, LOCK_SH) || dup2(c, 40) != 40 || flock(d, LOCK_EX)) scn_die("flock");
    scn_run(check, NULL);
}
