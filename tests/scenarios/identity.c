/* identity: who and where the process is.
 * cwd (a subdirectory), umask 027, rlimits (NOFILE 555/777, STACK 12 MiB, CORE 0,
 * NPROC), nice 7, CPU affinity (one CPU), comm "pmig-ident", personality
 * (ADDR_NO_RANDOMIZE|UNAME26), gid/groups, effective capabilities without
 * CAP_NET_RAW, timer slack, the pid, and the mm fields: /proc/self/stat code,
 * data, brk, stack, arg and env bounds, auxv, cmdline, environ, exe link. */
#include "common.h"
#include <grp.h>
#include <sched.h>
#include <linux/capability.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>

#define PERS (ADDR_NO_RANDOMIZE | UNAME26)
static char cwd[4096], exe[4096], auxv[4096], cmdline[4096], environ_[16384], mmfields[512], status_ids[1024];
static pid_t pid;
static int cpu;
static const int res[] = {RLIMIT_NOFILE, RLIMIT_STACK, RLIMIT_CORE, RLIMIT_NPROC, RLIMIT_MEMLOCK};
static struct rlimit lims[5];

/* stat fields 26-28 (startcode endcode startstack) and 45-51 (start_data .. env_end) */
static void mm_fields(char *out, size_t cap) {
    char buf[2048];
    scn_read_file("/proc/self/stat", buf, sizeof buf);
    char *p = strrchr(buf, ')') + 2;   /* field 3 */
    size_t n = 0;
    out[0] = 0;
    for (int f = 3; p && *p; f++) {
        char *sp = strchr(p, ' ');
        int len = sp ? (int)(sp - p) : (int)strcspn(p, "\n");
        if ((f >= 26 && f <= 28) || (f >= 45 && f <= 51)) n += (size_t)snprintf(out + n, cap - n, "%d=%.*s ", f, len, p);
        p = sp ? sp + 1 : NULL;
    }
}
static void ids(char *out, size_t cap) {
    const char *f[] = {"Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs"};
    size_t n = 0;
    for (int i = 0; i < 9; i++) {
        char v[256] = "";
        scn_status_field("/proc/self/status", f[i], v, sizeof v);
        n += (size_t)snprintf(out + n, cap - n, "%s=%s; ", f[i], v);
    }
}
static int same_file(const char *path, const char *was, char *buf, size_t cap) {
    ssize_t n = scn_read_file(path, buf, cap);
    return n >= 0 && memcmp(buf, was, (size_t)n + 1) == 0;
}

static int check(void) {
    static char buf[16384];
    CHECK(getpid() == pid, "pid %d, was %d", getpid(), pid);
    CHECK(getcwd(buf, sizeof buf) && strcmp(buf, cwd) == 0, "cwd '%s', want '%s'", buf, cwd);
    mode_t m = umask(0);
    umask(m);
    CHECK(m == 027, "umask %03o, want 027", m);
    for (int i = 0; i < 5; i++) {
        struct rlimit rl;
        getrlimit(res[i], &rl);
        CHECK(rl.rlim_cur == lims[i].rlim_cur && rl.rlim_max == lims[i].rlim_max, "rlimit %d: %lu/%lu, want %lu/%lu",
              res[i], (unsigned long)rl.rlim_cur, (unsigned long)rl.rlim_max, (unsigned long)lims[i].rlim_cur, (unsigned long)lims[i].rlim_max);
    }
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, 0);
    CHECK(nice == 7 && errno == 0, "nice %d, want 7", nice);
    cpu_set_t set;
    CHECK(sched_getaffinity(0, sizeof set, &set) == 0, "sched_getaffinity");
    CHECK(CPU_COUNT(&set) == 1 && CPU_ISSET(cpu, &set), "affinity has %d CPUs, want only CPU %d", CPU_COUNT(&set), cpu);
    char comm[16] = {0};
    prctl(PR_GET_NAME, comm);
    CHECK(strcmp(comm, "pmig-ident") == 0, "comm '%s'", comm);
    int pers = personality(0xffffffff);
    CHECK(pers == PERS, "personality %#x, want %#x", pers, PERS);
    struct utsname u;
    uname(&u);
    CHECK(strncmp(u.release, "2.6.", 4) == 0, "UNAME26 in effect but release is '%s'", u.release);
    CHECK(prctl(PR_GET_TIMERSLACK) == 123456, "timer slack %d, want 123456", prctl(PR_GET_TIMERSLACK));
    ids(buf, sizeof buf);
    CHECK(strcmp(buf, status_ids) == 0, "ids/caps now '%s', were '%s'", buf, status_ids);
    mm_fields(buf, sizeof buf);
    CHECK(strcmp(buf, mmfields) == 0, "mm fields now '%s', were '%s'", buf, mmfields);
    CHECK(same_file("/proc/self/auxv", auxv, buf, sizeof buf), "auxv changed");
    CHECK(same_file("/proc/self/cmdline", cmdline, buf, sizeof buf), "cmdline changed");
    CHECK(same_file("/proc/self/environ", environ_, buf, sizeof buf), "environ changed");
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    CHECK(n > 0, "readlink exe");
    buf[n] = 0;
    CHECK(strcmp(buf, exe) == 0, "exe link '%s', want '%s'", buf, exe);
    return 1;
}

int main(void) {
    scn_name = "identity";
    pid = getpid();
    if (mkdir("idwd", 0755) && errno != EEXIST) scn_die("mkdir");
    if (chdir("idwd") || !getcwd(cwd, sizeof cwd)) scn_die("chdir");
    umask(027);
    lims[0] = (struct rlimit){555, 777};
    lims[1] = (struct rlimit){12 << 20, RLIM_INFINITY};
    lims[2] = (struct rlimit){0, 4096};
    lims[3] = (struct rlimit){3000, 4000};
    lims[4] = (struct rlimit){1 << 20, 2 << 20};
    for (int i = 0; i < 5; i++)
        if (setrlimit(res[i], &lims[i])) scn_die("setrlimit %d", res[i]);
    if (setpriority(PRIO_PROCESS, 0, 7)) scn_die("setpriority");
    cpu_set_t set;
    sched_getaffinity(0, sizeof set, &set);
    for (int c = 0; c < CPU_SETSIZE; c++) if (CPU_ISSET(c, &set)) cpu = c;   /* the last allowed CPU */
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set)) scn_die("sched_setaffinity");
    if (prctl(PR_SET_NAME, "pmig-ident")) scn_die("PR_SET_NAME");
    if (personality(PERS) < 0) scn_die("personality");
    if (prctl(PR_SET_TIMERSLACK, 123456)) scn_die("timerslack");
    gid_t groups[] = {4242, 4343, 100};
    if (setgroups(3, groups) || setresgid(4242, 4242, 4242)) scn_die("setgroups/setresgid");
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    if (syscall(SYS_capget, &h, d)) scn_die("capget");
    d[CAP_NET_RAW / 32].effective &= ~(1u << (CAP_NET_RAW % 32));
    if (syscall(SYS_capset, &h, d)) scn_die("capset");
    ids(status_ids, sizeof status_ids);
    mm_fields(mmfields, sizeof mmfields);
    scn_read_file("/proc/self/auxv", auxv, sizeof auxv);
    scn_read_file("/proc/self/cmdline", cmdline, sizeof cmdline);
    scn_read_file("/proc/self/environ", environ_, sizeof environ_);
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) scn_die("readlink exe");
    exe[n] = 0;
    scn_run(check, NULL);
}
