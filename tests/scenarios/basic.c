/* basic: the smallest scenario (some anon memory, a heap pattern, a stack
 * pattern, and no alternate signal stack, which it must not gain). Used for
 * the bad-image tests, with argv[1] as its comm so those tests can look for
 * a wrongly created process by name. */
#include "common.h"
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>

static uint64_t *heap;
static char *anon;
static volatile uint64_t *stackpat;
static char comm[16];

static int check(void) {
    long bad;
    CHECK((bad = scn_verify(heap, 1 << 16, 1)) < 0, "heap word %ld", bad);
    CHECK((bad = scn_verify(anon, 1 << 20, 2)) < 0, "anon word %ld", bad);
    for (int i = 0; i < 64; i++) CHECK(stackpat[i] == scn_pat(3, (uint64_t)i), "stack word %d", i);
    char now[16] = {0};
    prctl(PR_GET_NAME, now);
    CHECK(strcmp(now, comm) == 0, "comm is '%s', want '%s'", now, comm);
    stack_t ss;
    CHECK(sigaltstack(NULL, &ss) == 0 && (ss.ss_flags & SS_DISABLE),
          "an alternate signal stack appeared (%p, %zu bytes, flags %d)", ss.ss_sp, ss.ss_size,
          ss.ss_flags);
    return 1;
}

int main(int argc, char **argv) {
    scn_name = "basic";
    if (argc > 1 && prctl(PR_SET_NAME, argv[1])) scn_die("PR_SET_NAME");
    prctl(PR_GET_NAME, comm);
    volatile uint64_t onstack[64];
    for (int i = 0; i < 64; i++) onstack[i] = scn_pat(3, (uint64_t)i);
    stackpat = onstack;
    heap = malloc(1 << 16);
    if (!heap) scn_die("malloc");
    scn_fill(heap, 1 << 16, 1);
    anon = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (anon == MAP_FAILED) scn_die("mmap");
    scn_fill(anon, 1 << 20, 2);
    scn_run(check, NULL);
}
