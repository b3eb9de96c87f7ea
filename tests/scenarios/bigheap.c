/* bigheap: a 1 GiB brk heap filled with a pattern (and a page at its very end). */
#include "common.h"

#define HEAP (1ul << 30)
static char *base;
static uint64_t round_seed = 77;

static int check(void) {
    CHECK((char *)sbrk(0) == base + HEAP, "brk is %p, want %p", sbrk(0), base + HEAP);
    long bad = scn_verify(base, HEAP, round_seed);
    CHECK(bad < 0, "1 GiB heap: word %ld (offset %#lx) wrong", bad, (unsigned long)bad * 8);
    return 1;
}

int main(void) {
    scn_name = "bigheap";
    base = sbrk(0);
    if (sbrk((intptr_t)HEAP) == (void *)-1) scn_die("sbrk 1 GiB");
    scn_fill(base, HEAP, round_seed);
    scn_run(check, NULL);
}
