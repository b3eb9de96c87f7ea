/* topfds: files at the top of the process's open-file limit, as valgrind
 * keeps its own (its descriptors just under the limit, the program's at the
 * bottom). The soft limit is raised to the hard one H, which the restorer
 * inherits too; then
 *   fd H-1   top.dat  O_RDWR at offset 3000 (written, then seeked back)
 *   fd H-2   a dup() of fd H-1 (the same open file, shared offset)
 * and fds 3..63 stay free. A restore that puts its own descriptors above
 * the process's highest finds no room under the limit there. Checked: both
 * fds name the same file as before, share their offset, which is still
 * 3000; the limits are still (H, H); and a new open() still works. */
#include "common.h"
#include <sys/resource.h>

static int top, below;
static struct stat st0;
static struct rlimit lim;

static int check(void) {
    struct stat st;
    CHECK(fstat(top, &st) == 0, "fd %d (top) is not open: errno %d", top, errno);
    CHECK(st.st_dev == st0.st_dev && st.st_ino == st0.st_ino, "fd %d is another file", top);
    CHECK(fstat(below, &st) == 0, "fd %d (below) is not open: errno %d", below, errno);
    CHECK(st.st_dev == st0.st_dev && st.st_ino == st0.st_ino, "fd %d is another file", below);
    off_t o = lseek(top, 0, SEEK_CUR);
    CHECK(o == 3000, "fd %d at offset %ld, want 3000", top, (long)o);
    CHECK(lseek(below, 10, SEEK_SET) == 10, "seek fd %d", below);
    o = lseek(top, 0, SEEK_CUR);
    CHECK(o == 10, "fds %d and %d no longer share their offset (%ld, want 10)", top, below, (long)o);
    CHECK(lseek(top, 3000, SEEK_SET) == 3000, "seek fd %d back", top);
    struct rlimit now;
    CHECK(getrlimit(RLIMIT_NOFILE, &now) == 0, "getrlimit");
    CHECK(now.rlim_cur == lim.rlim_cur && now.rlim_max == lim.rlim_max, "open-file limit (%lu, %lu), want (%lu, %lu)",
          (unsigned long)now.rlim_cur, (unsigned long)now.rlim_max, (unsigned long)lim.rlim_cur,
          (unsigned long)lim.rlim_max);
    int f = open("top.dat", O_RDONLY | O_CLOEXEC);
    CHECK(f >= 0, "open a new file: errno %d", errno);
    close(f);
    return 1;
}

int main(void) {
    scn_name = "topfds";
    if (getrlimit(RLIMIT_NOFILE, &lim)) scn_die("getrlimit");
    lim.rlim_cur = lim.rlim_max;
    if (lim.rlim_max == RLIM_INFINITY || lim.rlim_max < 128) scn_die("unusable open-file limit %lu", (unsigned long)lim.rlim_max);
    if (setrlimit(RLIMIT_NOFILE, &lim)) scn_die("setrlimit");
    int f = open("top.dat", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (f < 0) scn_die("open top.dat");
    static char buf[8192];
    scn_fill(buf, sizeof buf, 7);
    if (write(f, buf, sizeof buf) != (ssize_t)sizeof buf) scn_die("write top.dat");
    top = (int)lim.rlim_max - 1;
    below = top - 1;
    if (dup2(f, top) != top || dup2(f, below) != below) scn_die("dup2 to %d and %d", top, below);
    close(f);
    for (int i = 3; i < 64; i++) close(i);
    if (lseek(top, 3000, SEEK_SET) != 3000) scn_die("lseek");
    if (fstat(top, &st0)) scn_die("fstat");
    scn_run(check, NULL);
}
