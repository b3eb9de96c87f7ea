/* files: regular files with offsets and flags, and character devices.
 *   r    in.dat   O_RDONLY at offset 1234
 *   w    out.dat  O_WRONLY|O_CREAT|O_TRUNC, 777 bytes written (offset 777)
 *   a    app.dat  O_WRONLY|O_APPEND (each check appends and checks it went to the end)
 *   rw   rw.dat   O_RDWR|O_CLOEXEC at offset 500
 *   d1,d2        dup() of one open file description at offset 4000 (shared offset)
 *   hi   fd 100   dup2 of r2 onto a high number
 *   /dev/null (O_WRONLY|O_NONBLOCK), /dev/zero, /dev/urandom
 * and the set of open fds must stay exactly the same. */
#include "common.h"
#include <dirent.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#define SZ 10000
static int r, w, a, rw, d1, d2, hi, dnull, dzero, drand;
static char fdset[512];
static char data[SZ];

static void list_fds(char *out, size_t cap) {
    DIR *d = opendir("/proc/self/fd");
    int skip = dirfd(d);
    int have[1024] = {0};
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.' && atoi(e->d_name) != skip && atoi(e->d_name) < 1024) have[atoi(e->d_name)] = 1;
    closedir(d);
    size_t n = 0;
    out[0] = 0;
    for (int i = 0; i < 1024 && n + 8 < cap; i++)
        if (have[i]) n += (size_t)snprintf(out + n, cap - n, "%d ", i);
}

static int fd_is(int fd, const char *what, int accmode, int flags, int cloexec, off_t off) {
    int fl = fcntl(fd, F_GETFL), fdfl = fcntl(fd, F_GETFD);
    CHECK(fl >= 0, "%s: fd %d is not open", what, fd);
    CHECK((fl & O_ACCMODE) == accmode, "%s: access mode %#x, want %#x", what, fl & O_ACCMODE, accmode);
    CHECK((fl & (O_APPEND | O_NONBLOCK)) == flags, "%s: flags %#x, want %#x", what, fl & (O_APPEND | O_NONBLOCK), flags);
    CHECK(!!(fdfl & FD_CLOEXEC) == cloexec, "%s: FD_CLOEXEC is %d", what, !!(fdfl & FD_CLOEXEC));
    if (off >= 0) CHECK(lseek(fd, 0, SEEK_CUR) == off, "%s: offset %ld, want %ld", what, (long)lseek(fd, 0, SEEK_CUR), (long)off);
    return 1;
}
static int path_is(int fd, const char *want_suffix) {
    char p[64], link[512];
    snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(p, link, sizeof link - 1);
    CHECK(n > 0, "readlink fd %d", fd);
    link[n] = 0;
    size_t sl = strlen(want_suffix);
    CHECK((size_t)n >= sl && strcmp(link + n - sl, want_suffix) == 0, "fd %d is '%s', want '...%s'", fd, link, want_suffix);
    return 1;
}
static int chardev_is(int fd, unsigned mj, unsigned mn) {
    struct stat st;
    CHECK(fstat(fd, &st) == 0 && S_ISCHR(st.st_mode) && major(st.st_rdev) == mj && minor(st.st_rdev) == mn,
          "fd %d is not char device %u:%u", fd, mj, mn);
    return 1;
}

static int check(void) {
    char now[512];
    list_fds(now, sizeof now);
    CHECK(strcmp(now, fdset) == 0, "open fds '%s', want '%s'", now, fdset);
    if (!fd_is(r, "in.dat reader", O_RDONLY, 0, 0, 1234) || !path_is(r, "/in.dat")) return 0;
    char buf[64];
    CHECK(read(r, buf, 10) == 10 && memcmp(buf, data + 1234, 10) == 0, "in.dat reader: wrong data at offset 1234");
    lseek(r, 1234, SEEK_SET);
    if (!fd_is(w, "out.dat writer", O_WRONLY, 0, 0, 777) || !path_is(w, "/out.dat")) return 0;
    struct stat st;
    CHECK(fstat(w, &st) == 0 && st.st_size == 777, "out.dat size %ld", (long)st.st_size);
    if (!fd_is(a, "app.dat appender", O_WRONLY, O_APPEND, 0, -1) || !path_is(a, "/app.dat")) return 0;
    fstat(a, &st);
    off_t before = st.st_size;
    lseek(a, 0, SEEK_SET);
    CHECK(write(a, "check", 5) == 5, "append write");
    fstat(a, &st);
    CHECK(st.st_size == before + 5 && lseek(a, 0, SEEK_CUR) == before + 5, "O_APPEND write did not go to the end");
    if (!fd_is(rw, "rw.dat", O_RDWR, 0, 1, 500) || !path_is(rw, "/rw.dat")) return 0;
    CHECK(pread(rw, buf, 10, 500) == 10 && memcmp(buf, data + 500, 10) == 0, "rw.dat: wrong data at 500");
    if (!fd_is(d1, "dup 1", O_RDONLY, 0, 0, 4000) || !fd_is(d2, "dup 2", O_RDONLY, 0, 0, 4000)) return 0;
    if (!fd_is(hi, "fd 100", O_RDONLY, 0, 0, 4000) || !path_is(hi, "/in.dat")) return 0;
    CHECK(read(d1, buf, 7) == 7 && memcmp(buf, data + 4000, 7) == 0, "dup 1: wrong data at 4000");
    CHECK(lseek(d2, 0, SEEK_CUR) == 4007 && lseek(hi, 0, SEEK_CUR) == 4007, "dup'd fds no longer share their offset");
    lseek(d2, 4000, SEEK_SET);
    if (!fd_is(dnull, "/dev/null", O_WRONLY, O_NONBLOCK, 0, -1) || !chardev_is(dnull, 1, 3)) return 0;
    CHECK(write(dnull, "x", 1) == 1, "/dev/null write");
    if (!fd_is(dzero, "/dev/zero", O_RDONLY, 0, 0, -1) || !chardev_is(dzero, 1, 5)) return 0;
    memset(buf, 1, sizeof buf);
    CHECK(read(dzero, buf, sizeof buf) == sizeof buf, "/dev/zero read");
    for (size_t i = 0; i < sizeof buf; i++) CHECK(buf[i] == 0, "/dev/zero gave non-zero");
    if (!fd_is(drand, "/dev/urandom", O_RDONLY, 0, 0, -1) || !chardev_is(drand, 1, 9)) return 0;
    memset(buf, 0, sizeof buf);
    CHECK(read(drand, buf, sizeof buf) == sizeof buf, "/dev/urandom read");
    int nz = 0;
    for (size_t i = 0; i < sizeof buf; i++) nz += buf[i] != 0;
    CHECK(nz > 32, "/dev/urandom gave mostly zeros");
    return 1;
}

static int xopen(const char *p, int fl) {
    int fd = open(p, fl, 0644);
    if (fd < 0) scn_die("open %s", p);
    return fd;
}

int main(void) {
    scn_name = "files";
    scn_fill(data, SZ, 9);
    int f = xopen("in.dat", O_WRONLY | O_CREAT | O_TRUNC);
    if (write(f, data, SZ) != SZ) scn_die("write in.dat");
    close(f);
    f = xopen("rw.dat", O_WRONLY | O_CREAT | O_TRUNC);
    if (write(f, data, 1000) != 1000) scn_die("write rw.dat");
    close(f);
    f = xopen("app.dat", O_WRONLY | O_CREAT | O_TRUNC);
    if (write(f, data, 100) != 100) scn_die("write app.dat");
    close(f);
    r = xopen("in.dat", O_RDONLY);
    char tmp[1234];
    if (read(r, tmp, sizeof tmp) != sizeof tmp) scn_die("read");
    w = xopen("out.dat", O_WRONLY | O_CREAT | O_TRUNC);
    if (write(w, data, 777) != 777) scn_die("write out.dat");
    a = xopen("app.dat", O_WRONLY | O_APPEND);
    rw = xopen("rw.dat", O_RDWR | O_CLOEXEC);
    lseek(rw, 500, SEEK_SET);
    d1 = xopen("in.dat", O_RDONLY);
    lseek(d1, 4000, SEEK_SET);
    d2 = dup(d1);
    hi = dup2(d1, 100);
    if (d2 < 0 || hi != 100) scn_die("dup");
    dnull = xopen("/dev/null", O_WRONLY | O_NONBLOCK);
    dzero = xopen("/dev/zero", O_RDONLY);
    drand = xopen("/dev/urandom", O_RDONLY);
    list_fds(fdset, sizeof fdset);
    scn_run(check, NULL);
}
