/* ghost: files held open after they were deleted.
 *   a       read-write, 3 pages of a pattern and a tail, unlinked, offset 5000;
 *   a_dup   dup'ed from a onto fd 40 (one open file description);
 *   b       a second open of the same file (through /proc/self/fd), read-only,
 *           offset 123: its own offset, the same bytes;
 *   log     another deleted file, write-only and append, mode 0640.
 * Checked: both files are still unnamed, each fd has its offset and flags,
 * a and b are one file (a byte written through a is read through b), the
 * bytes and the mode are as they were. */
#include "common.h"
#include <sys/stat.h>

#define DUP_FD 40
#define LEN (3 * 4096)
#define TAIL "tail of the ghost"

static int a, b, logfd;
static char buf[LEN + sizeof TAIL];

static int check(void) {
    struct stat sa, sb, sd, sl;
    CHECK(fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && fstat(DUP_FD, &sd) == 0 && fstat(logfd, &sl) == 0,
          "fstat: %s", strerror(errno));
    CHECK(sa.st_nlink == 0 && sl.st_nlink == 0, "a file got a name: %lu and %lu links",
          (unsigned long)sa.st_nlink, (unsigned long)sl.st_nlink);
    CHECK(sa.st_ino == sb.st_ino && sa.st_ino == sd.st_ino && sa.st_dev == sb.st_dev,
          "a, b and fd %d are not one file", DUP_FD);
    CHECK(sa.st_ino != sl.st_ino, "the two deleted files became one");
    CHECK(sa.st_size == LEN + (off_t)strlen(TAIL), "a is %lld bytes", (long long)sa.st_size);
    CHECK((sl.st_mode & 0777) == 0640, "log mode %o, want 640", sl.st_mode & 0777);
    CHECK(lseek(a, 0, SEEK_CUR) == 5000, "a at %lld, want 5000", (long long)lseek(a, 0, SEEK_CUR));
    CHECK(lseek(DUP_FD, 0, SEEK_CUR) == 5000, "fd %d does not share a's offset", DUP_FD);
    CHECK(lseek(b, 0, SEEK_CUR) == 123, "b at %lld, want 123", (long long)lseek(b, 0, SEEK_CUR));
    int fa = fcntl(a, F_GETFL), fb = fcntl(b, F_GETFL), fl = fcntl(logfd, F_GETFL);
    CHECK((fa & O_ACCMODE) == O_RDWR && (fb & O_ACCMODE) == O_RDONLY, "flags a %#x b %#x", fa, fb);
    CHECK((fl & O_ACCMODE) == O_WRONLY && (fl & O_APPEND), "log flags %#x", fl);
    memset(buf, 0, sizeof buf);
    CHECK(pread(b, buf, sizeof buf, 0) == LEN + (ssize_t)strlen(TAIL), "pread b: %s", strerror(errno));
    long bad = scn_verify(buf, LEN, 77);
    CHECK(bad < 0, "word %ld of the pattern differs", bad);
    CHECK(!memcmp(buf + LEN, TAIL, strlen(TAIL)), "the tail differs");
    /* One file: a byte written through a is read through b. */
    char was = buf[10], now = 0, z = (char)~was;
    CHECK(pwrite(a, &z, 1, 10) == 1 && pread(b, &now, 1, 10) == 1 && now == z,
          "a write through a is not seen through b");
    CHECK(pwrite(a, &was, 1, 10) == 1, "put byte 10 back");
    /* The log's bytes, through a read-only open of its own. */
    char lg[32] = {0}, link[256] = {0}, path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", logfd);
    CHECK(readlink(path, link, sizeof link - 1) > 0 && strstr(link, " (deleted)"), "log's link: %s", link);
    int rl = open(path, O_RDONLY | O_CLOEXEC);
    CHECK(rl >= 0, "reopen log: %s", strerror(errno));
    ssize_t n = pread(rl, lg, sizeof lg - 1, 0);
    close(rl);
    CHECK(n == 9 && !strcmp(lg, "log line\n"), "log holds %zd bytes: %s", n, lg);
    return 1;
}

int main(void) {
    scn_name = "ghost";
    char name[] = "ghost-XXXXXX";
    a = mkstemp(name);
    if (a < 0) scn_die("mkstemp");
    scn_fill(buf, LEN, 77);
    memcpy(buf + LEN, TAIL, strlen(TAIL));
    if (write(a, buf, LEN + strlen(TAIL)) != (ssize_t)(LEN + strlen(TAIL))) scn_die("write");
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", a);
    b = open(path, O_RDONLY);
    if (b < 0) scn_die("open b");
    if (unlink(name) != 0) scn_die("unlink");
    if (lseek(a, 5000, SEEK_SET) != 5000 || lseek(b, 123, SEEK_SET) != 123) scn_die("lseek");
    if (dup2(a, DUP_FD) != DUP_FD) scn_die("dup2");
    char lname[] = "ghostlog-XXXXXX";
    int l = mkstemp(lname);
    if (l < 0) scn_die("mkstemp log");
    close(l);
    if (chmod(lname, 0640) != 0) scn_die("chmod");
    logfd = open(lname, O_WRONLY | O_APPEND);
    if (logfd < 0 || unlink(lname) != 0) scn_die("open log");
    if (write(logfd, "log line\n", 9) != 9) scn_die("write log");
    scn_run(check, NULL);
}
