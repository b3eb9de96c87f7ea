/* locks: a thread takes a POSIX lock on a file of its working directory and
 * lets it go again, over and over, as a database's transactions do: it holds
 * the lock most of the time (about 1 ms a round) and is without it for
 * about 0.1 ms (asleep). The dump catches it with or without the lock,
 * and the restore takes the lock again if it was held.
 *
 * While it holds the lock, the thread asks through a second open file
 * description of the file (an open-file-description lock query, which
 * POSIX locks conflict with) whether the lock is really held, and counts
 * its rounds. Restored while "holding" a lock the kernel no longer has, it
 * would see none and record the failure.
 *
 * check: no round failed, and the thread still makes rounds. */
#include "common.h"
#include <pthread.h>

static int fd, probe;
static int rounds, failed;
static char why[256];

/* Records why the thread stopped; read once `failed` is set. */
#define FAIL(...) do { snprintf(why, sizeof why, __VA_ARGS__); \
    __atomic_store_n(&failed, 1, __ATOMIC_RELEASE); return NULL; } while (0)

static int held_by_us(void) {
    struct flock q = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    if (fcntl(probe, F_OFD_GETLK, &q) != 0) return 0;
    return q.l_type == F_WRLCK && q.l_pid == getpid();
}

static void *locker(void *arg) {
    (void)arg;
    for (;;) {
        struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
        if (fcntl(fd, F_SETLKW, &l) != 0) {
            FAIL("round %d: lock: %s", rounds, strerror(errno));
        }
        /* About 1 ms with the lock, checked at both ends. */
        if (!held_by_us()) {
            FAIL("round %d: the lock just taken is not held", rounds);
        }
        volatile unsigned long x = (unsigned long)rounds;
        for (int i = 0; i < 200000; i++) x = x * 6364136223846793005ul + 1;
        if (!held_by_us()) {
            FAIL("round %d: the lock was lost while held", rounds);
        }
        l.l_type = F_UNLCK;
        if (fcntl(fd, F_SETLK, &l) != 0) {
            FAIL("round %d: unlock: %s", rounds, strerror(errno));
        }
        scn_bump_and_wake(&rounds);
        /* About 0.1 ms without it: a moment a dump can find by looking. */
        struct timespec pause = {0, 100 * 1000};
        nanosleep(&pause, NULL);
    }
}

static int check(void) {
    CHECK(!__atomic_load_n(&failed, __ATOMIC_ACQUIRE), "%s", why);
    int seen = __atomic_load_n(&rounds, __ATOMIC_ACQUIRE);
    CHECK(scn_wait_at_least(&rounds, seen + 3, 10.0), "no round made in 10 s (%d)", seen);
    CHECK(!__atomic_load_n(&failed, __ATOMIC_ACQUIRE), "%s", why);
    return 1;
}

int main(void) {
    scn_name = "locks";
    fd = open("locked", O_RDWR | O_CREAT, 0600);
    probe = open("locked", O_RDWR);
    if (fd < 0 || probe < 0) scn_die("open locked");
    pthread_t t;
    if (pthread_create(&t, NULL, locker, NULL)) scn_die("pthread_create");
    scn_run(check, NULL);
}
