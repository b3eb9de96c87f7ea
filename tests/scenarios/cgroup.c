/* cgroup: the process joins the cgroups whose cgroup.procs files it is
 * given as arguments (made for it by the harness, which removes them once
 * every copy of the process is gone) and checks that /proc/self/cgroup
 * still names what it named once they were joined. Without arguments it
 * prints "SKIP cgroup: ..." instead of READY and exits 0. */
#include "common.h"

static char want[4096];

static int read_file(const char *path, char *buf, size_t cap) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t len = 0;
    for (;;) {
        ssize_t r = read(fd, buf + len, cap - 1 - len);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        len += (size_t)r;
        if (len == cap - 1) break;
    }
    close(fd);
    buf[len] = 0;
    return (int)len;
}

static int check(void) {
    static char now[4096];
    CHECK(read_file("/proc/self/cgroup", now, sizeof now) > 0, "read /proc/self/cgroup");
    CHECK(!strcmp(now, want), "cgroups now:\n%.400s\nwant:\n%.400s", now, want);
    return 1;
}

int main(int argc, char **argv) {
    scn_name = "cgroup";
    if (argc < 2) {
        scn_puts("SKIP cgroup: no cgroup to join was given\n");
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        int fd = open(argv[i], O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, "0", 1) != 1) scn_die("join %s", argv[i]);
        close(fd);
    }
    if (read_file("/proc/self/cgroup", want, sizeof want) <= 0) scn_die("read /proc/self/cgroup");
    scn_run(check, NULL);
}
