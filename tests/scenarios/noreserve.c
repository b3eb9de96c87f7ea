/* noreserve: a sparse MAP_NORESERVE mapping larger than the machine's memory
 * and swap together (the way a JVM reserves its heap), with a few pages
 * written across it. Checked on every check: the mapping is still there, as
 * large, still without reserved swap ("nr" in smaps' VmFlags, if the kernel
 * set it here: overcommit mode 2 ignores the flag), and the written pages
 * hold their data. Without the flag, a node in overcommit mode 0 refuses to
 * map it at all. */
#include "common.h"
#include <sys/mman.h>

#define PG 4096ul
#define NPAGES 16
static char *area;
static size_t len;
static int had_nr;

static size_t page_at(int i) { return len / NPAGES * (size_t)i + (size_t)i * PG; }

static int check(void) {
    size_t l = 0;
    int nr = scn_vmflag((uintptr_t)area, "nr", &l);
    CHECK(nr >= 0, "no mapping at %p any more", (void *)area);
    CHECK(l == len, "mapping at %p is %zu bytes, want %zu", (void *)area, l, len);
    CHECK(nr == had_nr, "VmFlags nr %d, want %d (MAP_NORESERVE lost)", nr, had_nr);
    for (int i = 0; i < NPAGES; i++) {
        long bad = scn_verify(area + page_at(i), PG, 100 + (uint64_t)i);
        CHECK(bad < 0, "page %d at offset %#zx: word %ld differs", i, page_at(i), bad);
    }
    return 1;
}

int main(void) {
    scn_name = "noreserve";
    long pages = sysconf(_SC_PHYS_PAGES);
    char line[64];
    unsigned long swap_kb = 0;
    if (scn_status_field("/proc/meminfo", "SwapTotal", line, sizeof line) == 0) swap_kb = strtoul(line, NULL, 10);
    len = 2 * ((size_t)pages * PG + swap_kb * 1024);
    if (len < (64ul << 30)) len = 64ul << 30;
    len &= ~((1ul << 30) - 1);
    area = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (area == MAP_FAILED) scn_die("mmap %zu bytes MAP_NORESERVE", len);
    for (int i = 0; i < NPAGES; i++) scn_fill(area + page_at(i), PG, 100 + (uint64_t)i);
    size_t l = 0;
    had_nr = scn_vmflag((uintptr_t)area, "nr", &l);
    if (had_nr < 0) scn_die("no smaps entry for the mapping");
    scn_run(check, NULL);
}
