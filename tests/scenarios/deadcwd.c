/* deadcwd: a working directory removed while the process sits in it.
 * Setup: makes "deadcwd-XXXXXX" in its working directory, mode 2751, enters
 * it and removes it (rmdir ../NAME).
 * Checked: "." is still a directory, with no links, mode 2751; getcwd fails
 * with ENOENT, as does creating a file in it and listing it; "..", reached
 * from it, is the directory it was made in (same device and inode); the
 * kernel names it "PATH (deleted)". */
#include "common.h"
#include <dirent.h>
#include <sys/stat.h>

static struct stat parent;

static int check(void) {
    struct stat here, up;
    CHECK(stat(".", &here) == 0, "stat .: %s", strerror(errno));
    CHECK(S_ISDIR(here.st_mode), ". is not a directory (mode %o)", here.st_mode);
    CHECK(here.st_nlink == 0, ". has %lu links: not deleted", (unsigned long)here.st_nlink);
    CHECK((here.st_mode & 07777) == 02751, ". has mode %o, want 2751", here.st_mode & 07777);
    char buf[4096];
    errno = 0;
    CHECK(getcwd(buf, sizeof buf) == NULL && errno == ENOENT, "getcwd gave %s (errno %d)",
          errno ? "nothing" : buf, errno);
    int f = open("x", O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    int e = errno;
    if (f >= 0) close(f);
    CHECK(f < 0 && e == ENOENT, "a file was made in the deleted directory (errno %d)", e);
    int d = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK(d >= 0, "open .: %s", strerror(errno));
    char ents[256];
    long n = syscall(SYS_getdents64, d, ents, sizeof ents);
    e = errno;
    close(d);
    CHECK(n < 0 && e == ENOENT, "listing . gave %ld (errno %d)", n, e);
    CHECK(stat("..", &up) == 0, "stat ..: %s", strerror(errno));
    CHECK(up.st_dev == parent.st_dev && up.st_ino == parent.st_ino,
          ".. is inode %lu, not the directory it was made in (%lu)", (unsigned long)up.st_ino,
          (unsigned long)parent.st_ino);
    char link[4096] = {0};
    ssize_t l = readlink("/proc/self/cwd", link, sizeof link - 1);
    CHECK(l > 10 && !strcmp(link + l - 10, " (deleted)"), "/proc/self/cwd: %s", link);
    return 1;
}

int main(void) {
    scn_name = "deadcwd";
    if (stat(".", &parent) != 0) scn_die("stat .");
    char name[] = "deadcwd-XXXXXX";
    if (!mkdtemp(name)) scn_die("mkdtemp");
    if (chmod(name, 02751) != 0) scn_die("chmod");
    if (chdir(name) != 0) scn_die("chdir");
    char up[64];
    snprintf(up, sizeof up, "../%s", name);
    if (rmdir(up) != 0) scn_die("rmdir");
    scn_run(check, NULL);
}
