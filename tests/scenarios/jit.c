/* jit: code made at run time, as a JIT compiler makes it. A private
 * anonymous region of 64 pages is filled with a pattern; its last 32 pages
 * are then made executable (mprotect), so the region is two adjacent
 * mappings, and each of those pages begins with a small function returning
 * its own number. A JIT's code heap lies next to other anonymous memory the
 * same way, and a lazy restore that fills pages across the boundary of two
 * mappings must not lose either side (one UFFDIO_COPY cannot span two
 * mappings). Each check calls every function and verifies every other word
 * of the region. x86-64 only. */
#include "common.h"
#include <sys/mman.h>

#define PG 4096ul
#define PAGES 64ul
#define CODE_FROM 32ul
#define SEED 91
static unsigned char *region;

typedef int (*fn_t)(void);

/* mov eax, imm32; ret */
static void emit(unsigned char *p, uint32_t v) {
    p[0] = 0xb8;
    memcpy(p + 1, &v, 4);
    p[5] = 0xc3;
}

static int check(void) {
    const uint64_t *w = (const uint64_t *)region;
    for (unsigned long pg = 0; pg < PAGES; pg++) {
        /* The first word of a code page holds its function. */
        unsigned long from = pg >= CODE_FROM ? 1 : 0;
        for (unsigned long i = pg * PG / 8 + from; i < (pg + 1) * PG / 8; i++)
            CHECK(w[i] == scn_pat(SEED, i), "page %lu word %lu lost its content", pg,
                  i - pg * PG / 8);
        if (pg >= CODE_FROM) {
            fn_t f = (fn_t)(void *)(region + pg * PG);
            int got = f();
            CHECK(got == (int)(1000 + pg), "the function in page %lu returned %d", pg, got);
        }
    }
    return 1;
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    scn_name = "jit";
    region = mmap(NULL, PAGES * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED) scn_die("mmap");
    scn_fill(region, PAGES * PG, SEED);
    if (mprotect(region + CODE_FROM * PG, (PAGES - CODE_FROM) * PG,
                 PROT_READ | PROT_WRITE | PROT_EXEC) != 0)
        scn_die("mprotect");
    for (unsigned long pg = CODE_FROM; pg < PAGES; pg++)
        emit(region + pg * PG, (uint32_t)(1000 + pg));
    if (!check()) scn_die("the region does not verify before any move: %s", scn_reason);
    scn_run(check, scn_plain_read);
}
