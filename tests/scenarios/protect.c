/* protect: a 16 MiB region written once, whose protection a thread keeps
 * flipping between none and read-write (as garbage collectors and guard-page
 * schemes do). A copy made while the process runs (pre-copy's rounds) cannot
 * read the region whenever it is inaccessible; those pages are never written
 * again, so nothing but the region's content can tell whether they moved.
 * Each check makes the region read-write (the flipper waits) and verifies
 * every word. */
#include "common.h"
#include <pthread.h>
#include <sys/mman.h>

#define PG 4096ul
#define PAGES 4096ul
#define LEN (PAGES * PG)
static char *region;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned long flips;

static void *flipper(void *arg) {
    (void)arg;
    const struct timespec half = {0, 500 * 1000};
    /* Until the process exits. */
    for (int prot = PROT_NONE;; prot = prot == PROT_NONE ? PROT_READ | PROT_WRITE : PROT_NONE) {
        pthread_mutex_lock(&mu);
        if (mprotect(region, LEN, prot) != 0) scn_die("mprotect");
        flips++;
        pthread_mutex_unlock(&mu);
        nanosleep(&half, NULL);
    }
    return NULL;
}

static int check(void) {
    long bad;
    pthread_mutex_lock(&mu);
    int ok = mprotect(region, LEN, PROT_READ | PROT_WRITE) == 0;
    bad = ok ? scn_verify(region, LEN, 77) : 0;
    unsigned long f = flips;
    pthread_mutex_unlock(&mu);
    CHECK(ok, "mprotect read-write failed (errno %d)", errno);
    CHECK(bad < 0, "region word %ld (page %ld) lost its content after %lu flips", bad,
          bad * 8 / (long)PG, f);
    return 1;
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    scn_name = "protect";
    region = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED) scn_die("mmap");
    scn_fill(region, LEN, 77);
    pthread_t t;
    if (pthread_create(&t, NULL, flipper, NULL) != 0) scn_die("pthread_create");
    scn_run(check, scn_plain_read);
}
