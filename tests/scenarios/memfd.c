/* memfd: memory files and a mapped deleted file.
 *   heap    a memfd named "pmig-heap", 5 pages of a pattern, sealed against
 *           shrinking and growing, its fd kept (at offset 777), mapped
 *           shared and writable at A, again shared and read-only at B (the
 *           same pages: ZGC's views of its heap), and privately at C from
 *           its second page, one page of which the process wrote (its own
 *           copy);
 *   bare    a memfd made without MFD_ALLOW_SEALING, mapped shared, its fd
 *           closed;
 *   gone    a file mapped shared, then closed and unlinked;
 *   sparse  a memfd 1 GiB long with two pages of data (at 0 and 512 MiB),
 *           mapped shared, its fd kept: ZGC's heap, sized to its largest.
 * Checked: A and B still show the same pages (a write through A is read
 * through B and through the fd), C keeps its own page and sees the file in
 * the others, the bytes are the pattern, the fd's offset, the seals (bare:
 * F_SEAL_SEAL alone) and the names in /proc are as they were; sparse is
 * as long, its two pages as written, the rest holes (reading as zeros,
 * taking no memory). */
#include "common.h"
#include <sys/mman.h>

#define PAGES 5
#define LEN (PAGES * 4096)

#define SPARSE (1L << 30)
#define FAR (512L << 20)

static int heap_fd, sparse_fd;
static char *a, *b, *c, *bare, *gone, *sp;
static char buf[LEN];

/* The path /proc/self/maps gives the mapping at p, in out. */
static int map_path(const void *p, char *out, size_t n) {
    static char maps[65536];
    if (scn_read_file("/proc/self/maps", maps, sizeof maps) < 0) return -1;
    unsigned long at = (unsigned long)p;
    for (char *l = maps; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        size_t len = strcspn(l, "\n");
        if (strtoul(l, NULL, 16) != at) continue;
        char *path = memchr(l, '/', len);
        size_t k = path ? len - (size_t)(path - l) : 0;
        if (k >= n) k = n - 1;
        if (path) memcpy(out, path, k);
        out[k] = 0;
        return 0;
    }
    return -1;
}

static int check(void) {
    char path[256];
    long bad = scn_verify(a, LEN, 41);
    CHECK(bad < 0, "word %ld of A differs", bad);
    CHECK(memcmp(a, b, LEN) == 0, "A and B differ");
    char was = a[100], now = 0, z = (char)~was;
    a[100] = z;
    CHECK(b[100] == z, "a write through A is not seen through B");
    CHECK(pread(heap_fd, &now, 1, 100) == 1 && now == z, "a write through A is not read through the fd");
    a[100] = was;
    /* C: its first page is the process's own, the rest is the file's. */
    for (int i = 0; i < 4096; i++) CHECK(c[i] == (char)(i * 7), "C's own page differs at %d", i);
    CHECK(memcmp(c + 4096, a + 2 * 4096, LEN - 2 * 4096) == 0, "C does not see the file");
    char old = a[3 * 4096], flip = (char)~old;
    a[3 * 4096] = flip;
    char seen = c[2 * 4096];
    a[3 * 4096] = old;
    CHECK(seen == flip, "a write through A is not seen through C's file page");
    CHECK(lseek(heap_fd, 0, SEEK_CUR) == 777, "heap fd at %lld, want 777", (long long)lseek(heap_fd, 0, SEEK_CUR));
    int seals = fcntl(heap_fd, F_GET_SEALS);
    CHECK(seals == (F_SEAL_SHRINK | F_SEAL_GROW), "heap seals %#x", seals);
    CHECK(ftruncate(heap_fd, LEN + 4096) < 0 && errno == EPERM, "heap grew");
    struct stat st;
    CHECK(fstat(heap_fd, &st) == 0 && st.st_size == LEN && st.st_nlink == 0, "heap is %lld bytes, %lu links",
          (long long)st.st_size, (unsigned long)st.st_nlink);
    snprintf(path, sizeof path, "/proc/self/fd/%d", heap_fd);
    char link[256] = {0};
    CHECK(readlink(path, link, sizeof link - 1) > 0 && !strcmp(link, "/memfd:pmig-heap (deleted)"), "heap fd: %s", link);
    CHECK(map_path(a, path, sizeof path) == 0 && !strcmp(path, "/memfd:pmig-heap (deleted)"), "A maps %s", path);
    CHECK(map_path(b, path, sizeof path) == 0 && !strcmp(path, "/memfd:pmig-heap (deleted)"), "B maps %s", path);
    CHECK(map_path(bare, path, sizeof path) == 0 && !strcmp(path, "/memfd:bare (deleted)"), "bare maps %s", path);
    CHECK(map_path(gone, path, sizeof path) == 0 && strstr(path, " (deleted)"), "gone maps %s", path);
    bad = scn_verify(bare, 2 * 4096, 42);
    CHECK(bad < 0, "word %ld of bare differs", bad);
    bad = scn_verify(gone, 3 * 4096, 43);
    CHECK(bad < 0, "word %ld of gone differs", bad);
    /* The bare memfd, reopened: its own seals (none may be added). */
    snprintf(path, sizeof path, "/proc/self/map_files/%lx-%lx", (unsigned long)bare, (unsigned long)bare + 2 * 4096);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    CHECK(fd >= 0, "open %s: %s", path, strerror(errno));
    int s = fcntl(fd, F_GET_SEALS);
    close(fd);
    CHECK(s == F_SEAL_SEAL, "bare seals %#x", s);
    bad = scn_verify(sp, 4096, 44);
    CHECK(bad < 0, "word %ld of sparse's first page differs", bad);
    bad = scn_verify(sp + FAR, 4096, 45);
    CHECK(bad < 0, "word %ld of sparse's far page differs", bad);
    long long hole = -1;
    CHECK(pread(sparse_fd, &hole, sizeof hole, 256L << 20) == sizeof hole && hole == 0, "sparse's hole reads %llx", hole);
    CHECK(fstat(sparse_fd, &st) == 0 && st.st_size == SPARSE && st.st_blocks * 512 <= (1 << 20),
          "sparse is %lld bytes, %lld of them allocated", (long long)st.st_size, (long long)st.st_blocks * 512);
    return 1;
}

int main(void) {
    scn_name = "memfd";
    heap_fd = memfd_create("pmig-heap", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (heap_fd < 0) scn_die("memfd_create");
    scn_fill(buf, LEN, 41);
    if (write(heap_fd, buf, LEN) != LEN) scn_die("write heap");
    if (fcntl(heap_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW)) scn_die("seal heap");
    if (lseek(heap_fd, 777, SEEK_SET) != 777) scn_die("lseek");
    a = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, heap_fd, 0);
    b = mmap(NULL, LEN, PROT_READ, MAP_SHARED, heap_fd, 0);
    c = mmap(NULL, LEN - 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, heap_fd, 4096);
    if (a == MAP_FAILED || b == MAP_FAILED || c == MAP_FAILED) scn_die("mmap heap");
    for (int i = 0; i < 4096; i++) c[i] = (char)(i * 7);

    int bfd = memfd_create("bare", MFD_CLOEXEC);
    if (bfd < 0 || ftruncate(bfd, 2 * 4096)) scn_die("memfd bare");
    bare = mmap(NULL, 2 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, bfd, 0);
    if (bare == MAP_FAILED) scn_die("mmap bare");
    close(bfd);
    scn_fill(bare, 2 * 4096, 42);

    char name[] = "memfd-gone-XXXXXX";
    int g = mkstemp(name);
    if (g < 0 || ftruncate(g, 3 * 4096)) scn_die("mkstemp");
    gone = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, g, 0);
    if (gone == MAP_FAILED) scn_die("mmap gone");
    close(g);
    if (unlink(name)) scn_die("unlink");
    scn_fill(gone, 3 * 4096, 43);

    sparse_fd = memfd_create("sparse", MFD_CLOEXEC);
    if (sparse_fd < 0 || ftruncate(sparse_fd, SPARSE)) scn_die("memfd sparse");
    sp = mmap(NULL, SPARSE, PROT_READ | PROT_WRITE, MAP_SHARED, sparse_fd, 0);
    if (sp == MAP_FAILED) scn_die("mmap sparse");
    scn_fill(sp, 4096, 44);
    scn_fill(sp + FAR, 4096, 45);
    scn_run(check, NULL);
}
