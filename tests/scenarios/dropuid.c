/* dropuid: a program started as root that gives up its privileges, as
 * servers do: while root it creates a file only root may read (0600, in its
 * working directory), opens it, maps it, then sets its groups, gids and uids
 * to 65534. Checked after restore: still uid and gid 65534 (real, effective,
 * saved) with no supplementary groups, the file still readable through its
 * fd (pread) and through the mapping, and the working directory unchanged.
 * A restore reopens what the process named with the process's own ids; it
 * may not open this file (nor, here, reach its working directory), but it
 * held both all along. */
#include "common.h"
#include <grp.h>
#include <sys/mman.h>

#define TEXT "only root may read this\n"
#define ID 65534

static int fd;
static const char *map;
static char cwd[4096];

static int check(void) {
    char buf[64] = {0};
    uid_t r, e, s;
    gid_t gr, ge, gs;
    CHECK(getresuid(&r, &e, &s) == 0 && r == ID && e == ID && s == ID, "uids %d %d %d", r, e, s);
    CHECK(getresgid(&gr, &ge, &gs) == 0 && gr == ID && ge == ID && gs == ID, "gids %d %d %d", gr, ge, gs);
    CHECK(getgroups(0, NULL) == 0, "%d supplementary groups", getgroups(0, NULL));
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    CHECK(n == (ssize_t)strlen(TEXT) && strcmp(buf, TEXT) == 0, "pread gave %zd bytes '%s'", n, buf);
    CHECK(memcmp(map, TEXT, strlen(TEXT)) == 0, "the mapping reads '%.*s'", (int)strlen(TEXT), map);
    char now[4096];
    CHECK(getcwd(now, sizeof now) && strcmp(now, cwd) == 0, "cwd '%s', was '%s'", now, cwd);
    /* Not root: the file cannot be opened again. */
    int again = open("secret", O_RDONLY);
    CHECK(again < 0 && errno == EACCES, "opened its root-only file again (%d, errno %d)", again, errno);
    return 1;
}

int main(void) {
    scn_name = "dropuid";
    if (!getcwd(cwd, sizeof cwd)) scn_die("getcwd");
    fd = open("secret", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) scn_die("create secret");
    scn_write_all(fd, TEXT, strlen(TEXT));
    map = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) scn_die("mmap");
    if (setgroups(0, NULL) || setresgid(ID, ID, ID) || setresuid(ID, ID, ID)) scn_die("drop privileges");
    scn_run(check, NULL);
}
