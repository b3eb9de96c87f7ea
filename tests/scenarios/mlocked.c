/* mlocked: memory locked with mlock(), as programs holding keys or a
 * database's buffers lock it: a 4 MiB private anonymous region, filled with
 * a pattern and locked.
 * Checked on every check: the region still holds its data, it is still
 * locked ("lo" in smaps' VmFlags) and VmLck counts it. A lazy restore
 * (post-copy, and every migration whose pages arrive after the restore)
 * must not lock the region before its pages are in: locking populates it,
 * and a page already present is never asked for, so it would stay zero. */
#include "common.h"
#include <sys/mman.h>

#define LEN (4ul << 20)
static char *area;

static int check(void) {
    long bad = scn_verify(area, LEN, 77);
    CHECK(bad < 0, "the locked region differs at word %ld (its pages were lost)", bad);
    CHECK(scn_vmflag((uintptr_t)area, "lo", NULL) == 1, "the region at %p is not locked any more", (void *)area);
    char line[64];
    CHECK(scn_status_field("/proc/self/status", "VmLck", line, sizeof line) == 0, "no VmLck");
    unsigned long kb = strtoul(line, NULL, 10);
    CHECK(kb >= LEN / 1024, "VmLck is %lu kB, want at least %lu", kb, LEN / 1024);
    return 1;
}

int main(void) {
    scn_name = "mlocked";
    area = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (area == MAP_FAILED) scn_die("mmap");
    scn_fill(area, LEN, 77);
    if (mlock(area, LEN)) scn_die("mlock");
    scn_run(check, NULL);
}
