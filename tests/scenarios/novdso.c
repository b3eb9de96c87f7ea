/* novdso: a process that unmapped the vDSO's code and kept its data pages
 * ([vvar]), as valgrind does. The vvar pages are read by the vDSO's code
 * only, so such a process has no vDSO to restore. Time comes from the
 * clock_gettime system call itself (glibc's own would jump into the
 * unmapped code). Checked: still no [vdso] mapping, the monotonic clock
 * still moves forward, and a heap pattern is intact. */
#include "common.h"
#include <sys/mman.h>

#define SZ (256 * 1024)
static char *heap;
static struct timespec t0;

static int find_vdso(unsigned long *lo, unsigned long *hi) {
    static char maps[65536];
    if (scn_read_file("/proc/self/maps", maps, sizeof maps) < 0) return -1;
    for (char *l = maps; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        size_t n = strcspn(l, "\n");
        if (n >= 6 && strncmp(l + n - 6, "[vdso]", 6) == 0) {
            *lo = strtoul(l, NULL, 16);
            *hi = strtoul(strchr(l, '-') + 1, NULL, 16);
            return 1;
        }
    }
    return 0;
}

static int check(void) {
    unsigned long lo, hi;
    int v = find_vdso(&lo, &hi);
    CHECK(v == 0, "a vDSO is mapped again (%d)", v);
    struct timespec t;
    CHECK(syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &t) == 0, "clock_gettime: errno %d", errno);
    CHECK(t.tv_sec > t0.tv_sec || (t.tv_sec == t0.tv_sec && t.tv_nsec >= t0.tv_nsec), "the monotonic clock went back");
    long bad = scn_verify(heap, SZ, 11);
    CHECK(bad < 0, "heap word %ld differs", bad);
    return 1;
}

int main(void) {
    scn_name = "novdso";
    heap = malloc(SZ);
    if (!heap) scn_die("malloc");
    scn_fill(heap, SZ, 11);
    unsigned long lo, hi;
    if (find_vdso(&lo, &hi) != 1) scn_die("no [vdso] in /proc/self/maps");
    if (munmap((void *)lo, hi - lo)) scn_die("munmap the vDSO");
    if (syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &t0)) scn_die("clock_gettime");
    scn_run(check, NULL);
}
