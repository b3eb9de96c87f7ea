/* inotify: watches in a non-blocking instance, in the working directory
 * (files named after the pid, so copies of the process left running do not
 * share them):
 *   wd 1  a directory, IN_CREATE | IN_DELETE;
 *   wd 2  a file, IN_MODIFY;
 *   wd 3  removed at the setup, so the numbers have a gap;
 *   wd 4  a second file, IN_ATTRIB | IN_EXCL_UNLINK, through a symlink
 *         added with IN_DONT_FOLLOW (the watch is on the link itself).
 * A check makes each event (a file created in the directory and removed, a
 * write to the file, the link's times touched) and must read each under its
 * watch's number and nothing else, find watch 4's IN_EXCL_UNLINK in the
 * fdinfo and no watch 3; it leaves the queue empty, as it found it. */
#include "common.h"
#include <sys/inotify.h>

static int in;
static char dir[64], file[64], gone[64], second[64], link_[64], made[96];

/* Reads events until the queue is empty; sets bit 0/1/2/3 of *seen for
 * the expected (wd, mask, name) and fails on any other. */
static int read_events(int *seen) {
    char buf[4096] __attribute__((aligned(8)));
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n < 0 && errno == EAGAIN) return 1;
        CHECK(n > 0, "read the inotify: %s", strerror(errno));
        for (char *p = buf; p < buf + n;) {
            struct inotify_event *e = (struct inotify_event *)p;
            const char *name = e->len ? e->name : "";
            if (e->wd == 1 && (e->mask & IN_CREATE) && !strcmp(name, made + strlen(dir) + 1)) *seen |= 1;
            else if (e->wd == 1 && (e->mask & IN_DELETE) && !strcmp(name, made + strlen(dir) + 1)) *seen |= 2;
            else if (e->wd == 2 && (e->mask & IN_MODIFY)) *seen |= 4;
            else if (e->wd == 4 && (e->mask & IN_ATTRIB)) *seen |= 8;
            else return scn_fail("unexpected event wd %d mask %#x name '%s'", e->wd, e->mask, name);
            p += sizeof *e + e->len;
        }
    }
}

static int check(void) {
    int seen = 0;
    CHECK(read_events(&seen) && seen == 0, "events before the check (%#x)", seen);
    int f = open(made, O_CREAT | O_WRONLY, 0600);
    CHECK(f >= 0, "create %s", made);
    close(f);
    CHECK(unlink(made) == 0, "remove %s", made);
    int w = open(file, O_WRONLY | O_APPEND);
    CHECK(w >= 0 && write(w, "x", 1) == 1, "write %s", file);
    close(w);
    struct timespec ts[2] = {{0, UTIME_NOW}, {0, UTIME_NOW}};
    CHECK(utimensat(AT_FDCWD, link_, ts, AT_SYMLINK_NOFOLLOW) == 0, "touch %s", link_);
    CHECK(read_events(&seen), "%s", scn_reason);
    CHECK(seen == 15, "events seen %#x, want create, delete, modify and attrib (0xf)", seen);
    char path[64], info[2048];
    snprintf(path, sizeof path, "/proc/self/fdinfo/%d", in);
    CHECK(scn_read_file(path, info, sizeof info) > 0, "read %s", path);
    char *w4 = strstr(info, "inotify wd:4 ");
    CHECK(w4, "no watch 4 in the fdinfo: %s", info);
    char *m = strstr(w4, "mask:");
    unsigned long mask = m ? strtoul(m + 5, NULL, 16) : 0;
    CHECK(mask == (IN_ATTRIB | IN_EXCL_UNLINK), "watch 4 mask %#lx", mask);
    CHECK(!strstr(info, "inotify wd:3 "), "watch 3 came back");
    int fl = fcntl(in, F_GETFL);
    CHECK(fl >= 0 && (fl & O_NONBLOCK), "the instance is not non-blocking");
    return 1;
}

int main(void) {
    scn_name = "inotify";
    int pid = getpid();
    snprintf(dir, sizeof dir, "ino-dir-%d", pid);
    snprintf(file, sizeof file, "ino-file-%d", pid);
    snprintf(gone, sizeof gone, "ino-gone-%d", pid);
    snprintf(second, sizeof second, "ino-second-%d", pid);
    snprintf(link_, sizeof link_, "ino-link-%d", pid);
    snprintf(made, sizeof made, "%s/made", dir);
    if (mkdir(dir, 0700) && errno != EEXIST) scn_die("mkdir %s", dir);
    int f = open(file, O_CREAT | O_WRONLY, 0600);
    int g = open(gone, O_CREAT | O_WRONLY, 0600);
    int s = open(second, O_CREAT | O_WRONLY, 0600);
    if (f < 0 || g < 0 || s < 0) scn_die("create the files");
    close(f);
    close(g);
    close(s);
    unlink(link_);
    if (symlink(second, link_)) scn_die("symlink");
    in = inotify_init1(IN_NONBLOCK);
    if (in < 0) scn_die("inotify_init1");
    if (inotify_add_watch(in, dir, IN_CREATE | IN_DELETE) != 1) scn_die("watch 1");
    if (inotify_add_watch(in, file, IN_MODIFY) != 2) scn_die("watch 2");
    if (inotify_add_watch(in, gone, IN_MODIFY) != 3) scn_die("watch 3");
    if (inotify_add_watch(in, link_, IN_ATTRIB | IN_EXCL_UNLINK | IN_DONT_FOLLOW) != 4) scn_die("watch 4");
    if (inotify_rm_watch(in, 3)) scn_die("remove watch 3");
    char buf[256];
    if (read(in, buf, sizeof buf) <= 0) scn_die("read the IN_IGNORED of watch 3");
    scn_run(check, NULL);
}
