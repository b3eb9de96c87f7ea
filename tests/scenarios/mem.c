/* mem: every kind of mapping a normal program has.
 * anon private pages, brk heap and malloc, a region with PROT_NONE holes made
 * by mprotect, a read-only region, a private file mapping with modified pages,
 * a shared file mapping (must stay shared with the file: same bytes, and a
 * store is seen by pread), a 64 MiB region with
 * an untouched tail, and the whole /proc/self/maps unchanged. */
#include "common.h"
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>

#define PG 4096ul
static char *anon, *holes, *ro, *priv, *shared, *big;
static char *heap_brk, *brk_end;
static uint64_t *mallocs[6];
static const size_t msizes[6] = {24, 200, 4000, 70000, 300000, 2u << 20};
static int shared_fd, priv_fd;
static uint64_t shared_counter;
static char maps_before[65536];
#define NHOLE 64
#define BIG (64ul << 20)
#define BIG_TOUCHED (BIG - (1ul << 20))

static int is_hole(int i) { return i % 4 == 3; }

static void make_file(const char *path, size_t bytes, uint64_t seed, int *fdp) {
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) scn_die("open %s", path);
    char *buf = malloc(bytes);
    scn_fill(buf, bytes, seed);
    if (pwrite(fd, buf, bytes, 0) != (ssize_t)bytes) scn_die("pwrite %s", path);
    free(buf);
    *fdp = fd;
}

/* Is the byte at p readable? process_vm_readv on ourselves honours the page
 * protection (EFAULT for PROT_NONE) and needs no file descriptor. */
static int readable(const void *p) {
    char c;
    struct iovec local = {&c, 1}, remote = {(void *)p, 1};
    ssize_t r = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    if (r == 1) return 1;
    return r < 0 && errno == EFAULT ? 0 : -1;
}

static int check(void) {
    long bad;
    CHECK((bad = scn_verify(anon, 16 * PG, 1)) < 0, "anon region word %ld", bad);
    CHECK((char *)sbrk(0) == brk_end, "brk moved: %p vs %p", sbrk(0), brk_end);
    CHECK((bad = scn_verify(heap_brk, 64 * PG, 2)) < 0, "brk heap word %ld", bad);
    for (int i = 0; i < 6; i++)
        CHECK((bad = scn_verify(mallocs[i], msizes[i] & ~7ul, 10 + (uint64_t)i)) < 0,
              "malloc(%zu) word %ld", msizes[i], bad);
    for (int i = 0; i < NHOLE; i++) {
        char *p = holes + (size_t)i * PG;
        int r = readable(p);
        CHECK(r >= 0, "probe of page %d failed", i);
        if (is_hole(i)) {
            CHECK(r == 0, "PROT_NONE hole page %d is readable", i);
        } else {
            CHECK(r == 1, "page %d between holes is unreadable", i);
            CHECK((bad = scn_verify(p, PG, 100 + (uint64_t)i)) < 0, "holes page %d word %ld", i, bad);
        }
    }
    CHECK((bad = scn_verify(ro, 8 * PG, 3)) < 0, "read-only region word %ld", bad);
    /* private file mapping: pages 1,5,9 modified in memory, file untouched */
    static char fbuf[16 * PG];
    CHECK(pread(priv_fd, fbuf, sizeof fbuf, 0) == (ssize_t)sizeof fbuf, "pread priv.dat");
    CHECK((bad = scn_verify(fbuf, sizeof fbuf, 4)) < 0, "priv.dat on disk changed at word %ld", bad);
    for (int i = 0; i < 16; i++) {
        int mod = i == 1 || i == 5 || i == 9;
        bad = mod ? scn_verify(priv + (size_t)i * PG, PG, 40 + (uint64_t)i) : memcmp(priv + (size_t)i * PG, fbuf + (size_t)i * PG, PG) ? 0 : -1;
        CHECK(bad < 0, "private file mapping page %d (%s) wrong", i, mod ? "modified" : "unmodified");
    }
    /* shared file mapping: memory == file, and a new store reaches the file */
    CHECK(pread(shared_fd, fbuf, 8 * PG, 0) == (ssize_t)(8 * PG), "pread shared.dat");
    CHECK(memcmp(fbuf, shared, 8 * PG) == 0, "shared mapping differs from shared.dat");
    CHECK((bad = scn_verify(shared + 8, 8 * PG - 8, 5)) < 0, "shared mapping word %ld", bad);
    /* Another process may have moved the counter on since the dump (the
     * original, with --leave-running), so it need only not have gone back. */
    uint64_t c = *(volatile uint64_t *)shared;
    CHECK(c >= shared_counter, "shared counter went back from %lu to %lu",
          (unsigned long)shared_counter, (unsigned long)c);
    shared_counter = c + 1;
    *(volatile uint64_t *)shared = shared_counter;
    uint64_t disk = 0;
    CHECK(pread(shared_fd, &disk, 8, 0) == 8 && disk == shared_counter,
          "store into shared mapping did not reach the file (mapping is not shared)");
    /* 64 MiB: touched part has the pattern, the untouched tail reads as zero */
    CHECK((bad = scn_verify(big, BIG_TOUCHED, 6)) < 0, "64MiB region word %ld", bad);
    for (size_t off = BIG_TOUCHED; off < BIG; off += 8)
        CHECK(*(uint64_t *)(big + off) == 0, "untouched tail of 64MiB region not zero at %zu", off);
    /* the layout itself */
    static char maps_now[65536];
    CHECK(scn_read_file("/proc/self/maps", maps_now, sizeof maps_now) > 0, "read maps");
    if (strcmp(maps_before, maps_now) != 0) {
        size_t i = 0;
        while (maps_before[i] == maps_now[i]) i++;
        while (i > 0 && maps_before[i - 1] != '\n') i--;
        int lb = (int)strcspn(maps_before + i, "\n"), ln = (int)strcspn(maps_now + i, "\n");
        return scn_fail("/proc/self/maps changed: was '%.*s' now '%.*s'", lb, maps_before + i, ln, maps_now + i);
    }
    return 1;
}

int main(void) {
    scn_name = "mem";
    anon = mmap(NULL, 16 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (anon == MAP_FAILED) scn_die("mmap anon");
    scn_fill(anon, 16 * PG, 1);

    heap_brk = sbrk(0);
    if (sbrk(64 * PG) == (void *)-1) scn_die("sbrk");
    scn_fill(heap_brk, 64 * PG, 2);
    for (int i = 0; i < 6; i++) {
        mallocs[i] = malloc(msizes[i]);
        if (!mallocs[i]) scn_die("malloc");
        scn_fill(mallocs[i], msizes[i] & ~7ul, 10 + (uint64_t)i);
    }

    holes = mmap(NULL, NHOLE * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (holes == MAP_FAILED) scn_die("mmap holes");
    for (int i = 0; i < NHOLE; i++) {
        if (is_hole(i)) {
            if (mprotect(holes + (size_t)i * PG, PG, PROT_NONE)) scn_die("mprotect");
        } else {
            scn_fill(holes + (size_t)i * PG, PG, 100 + (uint64_t)i);
        }
    }

    ro = mmap(NULL, 8 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ro == MAP_FAILED) scn_die("mmap ro");
    scn_fill(ro, 8 * PG, 3);
    if (mprotect(ro, 8 * PG, PROT_READ)) scn_die("mprotect ro");

    make_file("priv.dat", 16 * PG, 4, &priv_fd);
    priv = mmap(NULL, 16 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE, priv_fd, 0);
    if (priv == MAP_FAILED) scn_die("mmap priv.dat");
    scn_fill(priv + 1 * PG, PG, 41);
    scn_fill(priv + 5 * PG, PG, 45);
    scn_fill(priv + 9 * PG, PG, 49);

    make_file("shared.dat", 8 * PG, 5, &shared_fd);
    shared = mmap(NULL, 8 * PG, PROT_READ | PROT_WRITE, MAP_SHARED, shared_fd, 0);
    if (shared == MAP_FAILED) scn_die("mmap shared.dat");
    scn_fill(shared + 8, 8 * PG - 8, 5);
    shared_counter = 7;
    *(uint64_t *)shared = shared_counter;

    big = mmap(NULL, BIG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (big == MAP_FAILED) scn_die("mmap 64MiB");
    scn_fill(big, BIG_TOUCHED, 6);

    /* Warm up everything check() uses, so the first check changes no mapping. */
    static char tmp[65536];
    scn_read_file("/proc/self/maps", tmp, sizeof tmp);
    readable(anon);
    brk_end = sbrk(0);
    check();
    if (scn_read_file("/proc/self/maps", maps_before, sizeof maps_before) <= 0) scn_die("read maps");
    shared_counter = *(uint64_t *)shared;
    scn_run(check, NULL);
}
