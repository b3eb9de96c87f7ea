/* timens: runs in a time namespace of its own, its monotonic clock 1000000 s
 * and its boot-time clock 2000000 s ahead of the host's (as a process that
 * started elsewhere would be). Every check verifies that both clocks keep
 * their distance to the wall clock (within 2 s, whenever the check comes; a
 * migration that gave it the host's clocks would move them by 1e6 s) and
 * never went back. */
#define _GNU_SOURCE
#include "common.h"
#include <sched.h>
#include <time.h>

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

static int64_t ns_of(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int64_t d_mono0, d_boot0, last_mono, last_boot;

static int check(void) {
    int64_t real = ns_of(CLOCK_REALTIME), mono = ns_of(CLOCK_MONOTONIC), boot = ns_of(CLOCK_BOOTTIME);
    CHECK(mono >= last_mono, "CLOCK_MONOTONIC went back by %.3f s", (double)(last_mono - mono) / 1e9);
    CHECK(boot >= last_boot, "CLOCK_BOOTTIME went back by %.3f s", (double)(last_boot - boot) / 1e9);
    int64_t dm = (mono - real) - d_mono0, db = (boot - real) - d_boot0;
    CHECK(dm > -2000000000LL && dm < 2000000000LL, "CLOCK_MONOTONIC moved %.3f s against the wall clock", (double)dm / 1e9);
    CHECK(db > -2000000000LL && db < 2000000000LL, "CLOCK_BOOTTIME moved %.3f s against the wall clock", (double)db / 1e9);
    CHECK(mono > 1000000LL * 1000000000, "CLOCK_MONOTONIC %.3f s: the namespace's offset is gone", (double)mono / 1e9);
    last_mono = mono;
    last_boot = boot;
    return 1;
}

int main(void) {
    scn_name = "timens";
    if (unshare(CLONE_NEWTIME)) scn_die("unshare(CLONE_NEWTIME)");
    int fd = open("/proc/self/timens_offsets", O_WRONLY);
    const char *offs = "monotonic 1000000 0\nboottime 2000000 0\n";
    if (fd < 0 || write(fd, offs, strlen(offs)) != (ssize_t)strlen(offs)) scn_die("write timens_offsets");
    close(fd);
    fd = open("/proc/self/ns/time_for_children", O_RDONLY);
    if (fd < 0 || setns(fd, CLONE_NEWTIME)) scn_die("enter the time namespace");
    close(fd);
    int64_t real = ns_of(CLOCK_REALTIME);
    last_mono = ns_of(CLOCK_MONOTONIC);
    last_boot = ns_of(CLOCK_BOOTTIME);
    d_mono0 = last_mono - real;
    d_boot0 = last_boot - real;
    if (last_mono < 1000000LL * 1000000000) scn_die("the offset did not take (monotonic %lld ns)", (long long)last_mono);
    scn_run(check, NULL);
}
