// no_new_privs plus a seccomp filter that makes mknodat fail with EPERM; computes, then
// shows the filter is still in force (mknod errno) and the Seccomp/NoNewPrivs status lines.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <errno.h>
#include <stddef.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <linux/audit.h>
int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 15;
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_mknodat, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = 4, .filter = f};
    int a = prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    int b = prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
    printf("setup %d %d\n", a, b); fflush(stdout);
    uint64_t x = 88172645463325252ULL, s = 0;
    for (long r = 0; r < rounds; r++) {
        for (long i = 0; i < 60000000; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; s += x >> 60; }
        printf("round %ld %llx\n", r, (unsigned long long)s); fflush(stdout);
    }
    int m = mknod("/nonexistent-dir/x", S_IFIFO | 0600, 0);
    printf("mknod %d errno %s\n", m, strerror(errno));
    FILE *st = fopen("/proc/self/status", "r"); char line[256];
    while (fgets(line, sizeof line, st)) if (!strncmp(line, "Seccomp", 7) || !strncmp(line, "NoNewPrivs", 10)) fputs(line, stdout);
    return 0;
}
