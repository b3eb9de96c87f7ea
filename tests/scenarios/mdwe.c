/* mdwe: memory-deny-write-execute (PR_SET_MDWE with
 * PR_MDWE_REFUSE_EXEC_GAIN), set once at start. Checked on every check:
 * PR_GET_MDWE still says so, and the kernel still enforces it: a fresh
 * read-write anonymous page cannot be made executable (EACCES), and a new
 * write+execute mapping is refused; the program's own code runs (it is
 * checking). A restore that dropped the flag would let both through. */
#include "common.h"
#include <sys/mman.h>
#include <sys/prctl.h>

#ifndef PR_SET_MDWE
#define PR_SET_MDWE 65
#define PR_GET_MDWE 66
#endif
#ifndef PR_MDWE_REFUSE_EXEC_GAIN
#define PR_MDWE_REFUSE_EXEC_GAIN (1UL << 0)
#endif

static int check(void) {
    long f = prctl(PR_GET_MDWE, 0, 0, 0, 0);
    CHECK(f == PR_MDWE_REFUSE_EXEC_GAIN, "PR_GET_MDWE %ld, want %lu", f, PR_MDWE_REFUSE_EXEC_GAIN);
    void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED, "mmap a read-write page: errno %d", errno);
    int r = mprotect(p, 4096, PROT_READ | PROT_EXEC);
    int e = errno;
    munmap(p, 4096);
    CHECK(r < 0 && e == EACCES, "a writable page became executable (mprotect %d, errno %d): MDWE lost", r, e);
    void *q = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (q != MAP_FAILED) munmap(q, 4096);
    CHECK(q == MAP_FAILED, "a write+execute mapping was allowed: MDWE lost");
    return 1;
}

int main(void) {
    scn_name = "mdwe";
    if (prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0)) scn_die("PR_SET_MDWE");
    scn_run(check, NULL);
}
