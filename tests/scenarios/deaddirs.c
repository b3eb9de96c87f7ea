/* deaddirs: directories removed while the process holds them.
 * Setup, in its working directory: makes "deadcwd-XXXXXX" (mode 2751),
 * enters it and removes it; opens "." there with O_PATH (fd `here`: the
 * same directory); makes "deaddir-XXXXXX" (mode 0700) in the old parent,
 * opens it O_RDONLY|O_DIRECTORY (fd `dfd`) and removes it.
 * Checked: "." and dfd are directories without links, with their modes;
 * `here` is the working directory, dfd another directory; getcwd fails
 * with ENOENT, as do creating a file in either and listing either; ".."
 * of both is the directory they were made in; the kernel names them
 * "PATH (deleted)"; dfd keeps its flags. */
#include "common.h"
#include <sys/stat.h>

static struct stat parent;
static int here, dfd;

/* Whether `d` is an empty deleted directory of mode `mode` whose ".." is
 * the parent: 1, or 0 with the reason recorded. */
static int dead_dir(int d, const char *what, unsigned mode) {
    struct stat st, up;
    CHECK(fstat(d, &st) == 0, "fstat %s: %s", what, strerror(errno));
    CHECK(S_ISDIR(st.st_mode), "%s is not a directory (mode %o)", what, st.st_mode);
    CHECK(st.st_nlink == 0, "%s has %lu links: not deleted", what, (unsigned long)st.st_nlink);
    CHECK((st.st_mode & 07777) == mode, "%s has mode %o, want %o", what, st.st_mode & 07777, mode);
    int f = openat(d, "x", O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    int e = errno;
    if (f >= 0) close(f);
    CHECK(f < 0 && e == ENOENT, "a file was made in %s (errno %d)", what, e);
    int l = openat(d, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK(l >= 0, "open %s: %s", what, strerror(errno));
    char ents[256];
    long n = syscall(SYS_getdents64, l, ents, sizeof ents);
    e = errno;
    close(l);
    CHECK(n < 0 && e == ENOENT, "listing %s gave %ld (errno %d)", what, n, e);
    CHECK(fstatat(d, "..", &up, 0) == 0, "stat %s/..: %s", what, strerror(errno));
    CHECK(up.st_dev == parent.st_dev && up.st_ino == parent.st_ino,
          "%s/.. is inode %lu, not the directory it was made in (%lu)", what,
          (unsigned long)up.st_ino, (unsigned long)parent.st_ino);
    char path[64], link[4096] = {0};
    snprintf(path, sizeof path, "/proc/self/fd/%d", d);
    ssize_t k = readlink(path, link, sizeof link - 1);
    CHECK(k > 10 && !strcmp(link + k - 10, " (deleted)"), "%s is named %s", what, link);
    return 1;
}

static int check(void) {
    int cwd = open(".", O_PATH | O_CLOEXEC);
    CHECK(cwd >= 0, "open .: %s", strerror(errno));
    int ok = dead_dir(cwd, "the working directory", 02751);
    struct stat c, h, x;
    int same = fstat(cwd, &c) == 0 && fstat(here, &h) == 0 && fstat(dfd, &x) == 0;
    close(cwd);
    if (!ok) return 0;
    CHECK(same, "fstat: %s", strerror(errno));
    CHECK(c.st_dev == h.st_dev && c.st_ino == h.st_ino, "fd %d is no longer the working directory",
          here);
    CHECK(c.st_ino != x.st_ino, "the two deleted directories became one");
    if (!dead_dir(dfd, "the opened directory", 0700)) return 0;
    int fl = fcntl(dfd, F_GETFL), hf = fcntl(here, F_GETFL);
    CHECK((fl & O_ACCMODE) == O_RDONLY && (fl & O_DIRECTORY), "dfd flags %#x", fl);
    CHECK(hf & O_PATH, "fd %d lost O_PATH (flags %#x)", here, hf);
    char buf[4096];
    errno = 0;
    CHECK(getcwd(buf, sizeof buf) == NULL && errno == ENOENT, "getcwd gave %s (errno %d)",
          errno ? "nothing" : buf, errno);
    return 1;
}

int main(void) {
    scn_name = "deaddirs";
    if (stat(".", &parent) != 0) scn_die("stat .");
    char other[] = "deaddir-XXXXXX";
    if (!mkdtemp(other)) scn_die("mkdtemp other");
    if (chmod(other, 0700) != 0) scn_die("chmod other");
    dfd = open(other, O_RDONLY | O_DIRECTORY);
    if (dfd < 0 || rmdir(other) != 0) scn_die("open and remove %s", other);
    char name[] = "deadcwd-XXXXXX";
    if (!mkdtemp(name)) scn_die("mkdtemp");
    if (chmod(name, 02751) != 0) scn_die("chmod");
    if (chdir(name) != 0) scn_die("chdir");
    here = open(".", O_PATH);
    if (here < 0) scn_die("open . O_PATH");
    char up[64];
    snprintf(up, sizeof up, "../%s", name);
    if (rmdir(up) != 0) scn_die("rmdir");
    scn_run(check, NULL);
}
