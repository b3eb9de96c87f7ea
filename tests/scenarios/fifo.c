/* fifo: a named pipe the process holds alone, made in its working
 * directory ("pipe.fifo"), checked without consuming it:
 *   r    a read end, O_NONBLOCK, dup'ed onto fd 41 (one open file
 *        description);
 *   w    a write end, blocking;
 *   r2   a second read end, opened on its own (another open file
 *        description of the same pipe);
 * with 100 KiB buffered (more than the default 64 KiB capacity: its
 * capacity is 1 MiB). After a move the three are still one pipe, the one
 * named by the path, the bytes are there once (not twice: on one machine
 * the restore opens the pipe the frozen original still holds), and a
 * writer that opens the path reaches the process: at each check a child
 * opens it, writes a line, and the process reads the line back at once
 * (FIFO order: it is appended after the buffered bytes, so the check
 * reads those out first and writes them back). At exit the path is
 * removed. */
#include "common.h"
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define BYTES (100 * 1024)
#define CAP (1 << 20)
#define DUP_FD 41
#define NAME "pipe.fifo"

static int r, w, r2;
static unsigned char data[BYTES];
static char path[4096];

static void remove_fifo(void) { unlink(path); }

static int read_exactly(int fd, unsigned char *buf, size_t want) {
    size_t got = 0;
    while (got < want) {
        ssize_t k = read(fd, buf + got, want - got);
        if (k <= 0) return -1;
        got += (size_t)k;
    }
    return 0;
}

static int check(void) {
    static unsigned char buf[BYTES];
    int q = -1;
    CHECK(ioctl(r, FIONREAD, &q) == 0 && q == BYTES, "the named pipe holds %d bytes, want %d", q, BYTES);
    int cap = fcntl(w, F_GETPIPE_SZ);
    CHECK(cap == CAP, "capacity %d, want %d", cap, CAP);
    struct stat sp, sr, sw, s2, sd;
    CHECK(stat(path, &sp) == 0 && S_ISFIFO(sp.st_mode), "%s is no longer a named pipe", path);
    CHECK((sp.st_mode & 07777) == 0640, "%s has mode %o, want 640", path, sp.st_mode & 07777);
    CHECK(fstat(r, &sr) == 0 && fstat(w, &sw) == 0 && fstat(r2, &s2) == 0 && fstat(DUP_FD, &sd) == 0,
          "fstat: %s", strerror(errno));
    CHECK(sr.st_ino == sp.st_ino && sw.st_ino == sp.st_ino && s2.st_ino == sp.st_ino && sr.st_dev == sp.st_dev,
          "the descriptors are not the pipe at %s", path);
    CHECK(sd.st_ino == sr.st_ino, "fd %d is no longer a copy of the read end", DUP_FD);
    int fr = fcntl(r, F_GETFL), fw = fcntl(w, F_GETFL), f2 = fcntl(r2, F_GETFL);
    CHECK((fr & O_ACCMODE) == O_RDONLY && (fr & O_NONBLOCK), "read end flags %#o", fr);
    CHECK((fw & O_ACCMODE) == O_WRONLY && !(fw & O_NONBLOCK), "write end flags %#o", fw);
    CHECK((f2 & O_ACCMODE) == O_RDONLY && !(f2 & O_NONBLOCK), "second read end flags %#o", f2);
    /* One open file description: a flag set through the copy shows in r. */
    CHECK(fcntl(DUP_FD, F_SETFL, fr & ~O_NONBLOCK) == 0 && !(fcntl(r, F_GETFL) & O_NONBLOCK) &&
              fcntl(DUP_FD, F_SETFL, fr) == 0,
          "fd %d and the read end no longer share their flags", DUP_FD);
    CHECK(read_exactly(r, buf, BYTES) == 0 && memcmp(buf, data, BYTES) == 0, "the named pipe's data changed");
    int e = -1;
    CHECK(ioctl(r, FIONREAD, &e) == 0 && e == 0, "%d more bytes after the data (doubled?)", e);
    /* A writer that opens the path now. */
    pid_t c = fork();
    CHECK(c >= 0, "fork: %s", strerror(errno));
    if (c == 0) {
        int fd = open(path, O_WRONLY | O_NONBLOCK);
        _exit(fd >= 0 && write(fd, "hello\n", 6) == 6 ? 0 : 1);
    }
    int st = 0;
    CHECK(waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 0, "a writer could not open %s", path);
    char line[8] = {0};
    CHECK(read(r2, line, 6) == 6 && !memcmp(line, "hello\n", 6), "the writer's line did not arrive ('%s')", line);
    /* Put the data back for the next check. */
    size_t put = 0;
    while (put < BYTES) {
        ssize_t k = write(w, data + put, BYTES - put);
        CHECK(k > 0, "write the data back: %s", strerror(errno));
        put += (size_t)k;
    }
    return 1;
}

int main(void) {
    scn_name = "fifo";
    if (!getcwd(path, sizeof path - sizeof NAME - 1)) scn_die("getcwd");
    strcat(path, "/" NAME);
    unlink(path);
    mode_t old = umask(0);
    if (mkfifo(path, 0640)) scn_die("mkfifo %s", path);
    umask(old);
    if (atexit(remove_fifo)) scn_die("atexit");
    r = open(path, O_RDONLY | O_NONBLOCK);
    w = open(path, O_WRONLY);
    r2 = open(path, O_RDONLY | O_NONBLOCK);
    if (r < 0 || w < 0 || r2 < 0) scn_die("open %s", path);
    if (fcntl(r2, F_SETFL, 0)) scn_die("fcntl");
    if (dup2(r, DUP_FD) != DUP_FD) scn_die("dup2");
    if (fcntl(w, F_SETPIPE_SZ, CAP) < 0) scn_die("F_SETPIPE_SZ");
    scn_fill(data, BYTES, 77);
    size_t put = 0;
    while (put < BYTES) {
        ssize_t k = write(w, data + put, BYTES - put);
        if (k <= 0) scn_die("write");
        put += (size_t)k;
    }
    scn_run(check, NULL);
}
