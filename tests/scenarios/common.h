/* Shared helpers for the pmig scenario programs.
 *
 * Protocol of every scenario: set up state, write "READY\n" to stdout, then
 * block in read(0) and answer one line per command:
 *   "check" -> "PASS <name>" or "FAIL <name>: <reason>"
 *   "quit" or EOF -> exit 0 if every check passed (and at least none failed), else 1.
 * Setup errors go to stderr and exit 2 (the harness then sees EOF instead of READY).
 * The helpers avoid stdio and malloc on the check path, so a check changes as
 * little process state as possible. */
#ifndef PMIG_SCENARIO_COMMON_H
#define PMIG_SCENARIO_COMMON_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SCN_FN static __attribute__((unused))

static const char *scn_name = "scenario";
static int scn_any_failed;
static char scn_reason[1024];

/* Record why a check failed; returns 0 so checks can `return scn_fail(...)`. */
__attribute__((format(printf, 1, 2))) SCN_FN int scn_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(scn_reason, sizeof scn_reason, fmt, ap);
    va_end(ap);
    return 0;
}
#define CHECK(cond, ...) do { if (!(cond)) return scn_fail(__VA_ARGS__); } while (0)

SCN_FN void scn_write_all(int fd, const char *s, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) _exit(3);
        s += w;
        n -= (size_t)w;
    }
}
SCN_FN void scn_puts(const char *s) { scn_write_all(1, s, strlen(s)); }

__attribute__((format(printf, 1, 2), noreturn)) SCN_FN void scn_die(const char *fmt, ...) {
    char buf[512];
    int e = errno;
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(buf, sizeof buf, "%s: setup: ", scn_name);
    n += vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    va_end(ap);
    snprintf(buf + n, sizeof buf - (size_t)n, " (errno %d: %s)\n", e, strerror(e));
    scn_write_all(2, buf, strlen(buf));
    _exit(2);
}

SCN_FN inline uint64_t scn_pat(uint64_t seed, uint64_t i) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (seed * 0xD1B54A32D192ED03ull);
    return x ^ (x >> 29);
}
SCN_FN void scn_fill(void *p, size_t bytes, uint64_t seed) {
    uint64_t *w = p;
    for (size_t i = 0; i < bytes / 8; i++) w[i] = scn_pat(seed, i);
}
/* Returns the index of the first bad word, or -1 if all match. */
SCN_FN long scn_verify(const void *p, size_t bytes, uint64_t seed) {
    const uint64_t *w = p;
    for (size_t i = 0; i < bytes / 8; i++)
        if (w[i] != scn_pat(seed, i)) return (long)i;
    return -1;
}

/* Read a whole (small) file into buf, NUL-terminated. Returns length or -1. */
SCN_FN ssize_t scn_read_file(const char *path, char *buf, size_t cap) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t len = 0;
    while (len + 1 < cap) {
        ssize_t r = read(fd, buf + len, cap - 1 - len);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        len += (size_t)r;
    }
    close(fd);
    buf[len] = 0;
    return (ssize_t)len;
}

/* Value of a "Field:\t..." line in a /proc status file, copied into out. */
SCN_FN int scn_status_field(const char *path, const char *field, char *out, size_t cap) {
    char buf[8192];
    if (scn_read_file(path, buf, sizeof buf) < 0) return -1;
    size_t fl = strlen(field);
    for (char *l = buf; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (strncmp(l, field, fl) == 0 && l[fl] == ':') {
            char *v = l + fl + 1;
            while (*v == ' ' || *v == '\t') v++;
            size_t n = strcspn(v, "\n");
            if (n >= cap) n = cap - 1;
            memcpy(out, v, n);
            out[n] = 0;
            return 0;
        }
    }
    return -1;
}
/* The permissions ("rw-s", ...) /proc/self/maps gives the mapping that
 * starts at p, in out: 0, or -1 if there is none. */
SCN_FN int scn_map_perms(const void *p, char out[5]) {
    static char maps[65536];
    if (scn_read_file("/proc/self/maps", maps, sizeof maps) < 0) return -1;
    for (char *l = maps; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (strtoul(l, NULL, 16) != (unsigned long)p) continue;
        char *sp = strchr(l, ' ');
        if (!sp) return -1;
        memcpy(out, sp + 1, 4);
        out[4] = 0;
        return 0;
    }
    return -1;
}

/* Whether the smaps entry of the mapping starting at `start` lists the
 * VmFlags flag `flag` (two letters): 1 or 0, -1 if there is no such entry.
 * The mapping's length goes to `len_out` if not NULL. */
SCN_FN int scn_vmflag(uintptr_t start, const char *flag, size_t *len_out) {
    static char buf[1 << 20];
    if (scn_read_file("/proc/self/smaps", buf, sizeof buf) < 0) return -1;
    char head[32];
    snprintf(head, sizeof head, "\n%lx-", (unsigned long)start);
    char *l = strstr(buf, head + 1) == buf ? buf : strstr(buf, head);
    if (!l) return -1;
    if (*l == '\n') l++;
    unsigned long s, e;
    if (sscanf(l, "%lx-%lx", &s, &e) != 2) return -1;
    if (len_out) *len_out = e - s;
    char *f = strstr(l, "VmFlags:");
    if (!f) return -1;
    char flags[256], want[8];
    size_t n = strcspn(f + 8, "\n");
    if (n > sizeof flags - 2) n = sizeof flags - 2;
    memcpy(flags, f + 8, n);
    flags[n] = ' ';
    flags[n + 1] = 0;
    snprintf(want, sizeof want, " %s ", flag);
    return strstr(flags, want) != NULL;
}

SCN_FN uint64_t scn_status_hex(const char *path, const char *field) {
    char v[64];
    if (scn_status_field(path, field, v, sizeof v) < 0) return ~0ull;
    return strtoull(v, NULL, 16);
}

SCN_FN long scn_futex(void *addr, int op, int val, const struct timespec *ts) {
    return syscall(SYS_futex, addr, op, val, ts, NULL, 0);
}
SCN_FN pid_t scn_gettid(void) { return (pid_t)syscall(SYS_gettid); }
SCN_FN double scn_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Wait (bounded) until *word >= target. Returns 1 on success. */
SCN_FN int scn_wait_at_least(int *word, int target, double timeout_s) {
    double end = scn_now() + timeout_s;
    for (;;) {
        int v = __atomic_load_n(word, __ATOMIC_ACQUIRE);
        if (v >= target) return 1;
        double left = end - scn_now();
        if (left <= 0) return 0;
        struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
        scn_futex(word, FUTEX_WAIT_PRIVATE, v, &ts);
    }
}
SCN_FN void scn_bump_and_wake(int *word) {
    __atomic_add_fetch(word, 1, __ATOMIC_RELEASE);
    scn_futex(word, FUTEX_WAKE_PRIVATE, 0x7fffffff, NULL);
}

typedef int (*scn_check_fn)(void);
typedef ssize_t (*scn_read_fn)(int fd, void *buf, size_t n);
SCN_FN ssize_t scn_plain_read(int fd, void *buf, size_t n) { return read(fd, buf, n); }

/* Asks a helper thread that waits on *ask (sets it to 1 and wakes it) and
 * waits until the thread bumps *done: bounded without a clock, by futex
 * waits with a relative timeout (20 s in all). 1 if it answered. */
SCN_FN int scn_ask_thread(int *ask, int *done) {
    int before = __atomic_load_n(done, __ATOMIC_ACQUIRE);
    __atomic_store_n(ask, 1, __ATOMIC_RELEASE);
    scn_futex(ask, FUTEX_WAKE, 1, NULL);
    for (int i = 0; i < 2000 && __atomic_load_n(done, __ATOMIC_ACQUIRE) == before; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        scn_futex(done, FUTEX_WAIT, before, &ts);
    }
    return __atomic_load_n(done, __ATOMIC_ACQUIRE) != before;
}

/* The command loop. Never returns.
 * If stdin is a regular file (the multi-node tests: a file on a file system
 * every node shares, which moves with the process), the end of the file is
 * not the end of the commands: the loop follows the file like `tail -f`,
 * polling every 10 ms, for at most 10 minutes without a new command. */
__attribute__((noreturn)) SCN_FN void scn_run(scn_check_fn check, scn_read_fn rd) {
    static char line[256];
    size_t len = 0;
    struct stat st0;
    int follow = fstat(0, &st0) == 0 && S_ISREG(st0.st_mode);
    long idle_polls = 0;
    if (!rd) rd = scn_plain_read;
    scn_puts("READY\n");
    for (;;) {
        char *nl = memchr(line, '\n', len);
        if (!nl) {
            if (len == sizeof line) len = 0; /* overlong garbage: drop */
            ssize_t r = rd(0, line + len, sizeof line - len);
            if (r < 0 && errno == EINTR) continue;
            if (r == 0 && follow && idle_polls++ < 60000) {
                struct timespec ts = {0, 10 * 1000 * 1000};
                nanosleep(&ts, NULL);
                continue;
            }
            if (r <= 0) exit(scn_any_failed ? 1 : 0);
            idle_polls = 0;
            len += (size_t)r;
            continue;
        }
        *nl = 0;
        char out[1200];
        if (strcmp(line, "check") == 0) {
            scn_reason[0] = 0;
            if (check()) {
                snprintf(out, sizeof out, "PASS %s\n", scn_name);
            } else {
                scn_any_failed = 1;
                snprintf(out, sizeof out, "FAIL %s: %s\n", scn_name, scn_reason[0] ? scn_reason : "?");
            }
            scn_puts(out);
        } else if (strcmp(line, "quit") == 0) {
            exit(scn_any_failed ? 1 : 0);
        } else {
            scn_any_failed = 1;
            snprintf(out, sizeof out, "FAIL %s: unknown command '%.100s'\n", scn_name, line);
            scn_puts(out);
        }
        size_t used = (size_t)(nl - line) + 1;
        memmove(line, nl + 1, len - used);
        len -= used;
    }
}

#endif
