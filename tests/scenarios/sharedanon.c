/* sharedanon: shared anonymous memory the process alone maps.
 *   obj     MAP_SHARED | MAP_ANONYMOUS, 8 pages: pages 0-4 and 6-7 filled
 *           with a pattern, page 5 never touched; page 2 released with
 *           MADV_DONTNEED (a shared page keeps its data: the next access
 *           maps it again), pages 6-7 made read-only (one object, two
 *           mappings);
 *   zero    a MAP_SHARED mapping of /dev/zero, 2 pages, filled.
 * Checked: the bytes are the pattern, the released page too, the untouched
 * page reads zeros, pages 6-7 are read-only and the rest writable. Every
 * check releases page 2 again, so that each move finds it released. */
#include "common.h"
#include <sys/mman.h>

#define PG 4096
static char *obj, *zero;

static int check(void) {
    char p[5];
    for (int i = 0; i < 8; i++) {
        if (i == 5) continue;
        long bad = scn_verify(obj + i * PG, PG, 60 + (uint64_t)i);
        CHECK(bad < 0, "word %ld of page %d differs%s", bad, i, i == 2 ? " (the released page)" : "");
    }
    for (int k = 0; k < PG; k++) CHECK(obj[5 * PG + k] == 0, "the untouched page has %d at %d", obj[5 * PG + k], k);
    long bad = scn_verify(zero, 2 * PG, 68);
    CHECK(bad < 0, "word %ld of the /dev/zero mapping differs", bad);
    CHECK(scn_map_perms(obj, p) == 0 && !strcmp(p, "rw-s"), "pages 0-5 are %s", p);
    CHECK(scn_map_perms(obj + 6 * PG, p) == 0 && !strcmp(p, "r--s"), "pages 6-7 are %s", p);
    CHECK(madvise(obj + 2 * PG, PG, MADV_DONTNEED) == 0, "release page 2: %s", strerror(errno));
    return 1;
}

int main(void) {
    scn_name = "sharedanon";
    obj = mmap(NULL, 8 * PG, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (obj == MAP_FAILED) scn_die("mmap: %s", strerror(errno));
    for (int i = 0; i < 8; i++)
        if (i != 5) scn_fill(obj + i * PG, PG, 60 + (uint64_t)i);
    if (madvise(obj + 2 * PG, PG, MADV_DONTNEED)) scn_die("madvise: %s", strerror(errno));
    if (mprotect(obj + 6 * PG, 2 * PG, PROT_READ)) scn_die("mprotect: %s", strerror(errno));
    int fd = open("/dev/zero", O_RDWR | O_CLOEXEC);
    if (fd < 0) scn_die("open /dev/zero: %s", strerror(errno));
    zero = mmap(NULL, 2 * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (zero == MAP_FAILED) scn_die("mmap /dev/zero: %s", strerror(errno));
    close(fd);
    scn_fill(zero, 2 * PG, 68);
    scn_run(check, NULL);
}
