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
 * would see none (or the frozen original's) and record the failure.
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

/* What the last query saw, for the failure's message. */
static char seen[128];

/* Whether the kernel says this process holds the lock. The process may
 * move between any two instructions, and its pid may change with the move
 * (the nodes of one machine share a pid namespace): an answer is only
 * compared with the pid it had when it asked, and asked again if the pid
 * changed meanwhile. */
static int held_by_us(void) {
    for (int tries = 0; tries < 5; tries++) {
        pid_t before = getpid();
        struct flock q = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
        if (fcntl(probe, F_OFD_GETLK, &q) != 0) {
            snprintf(seen, sizeof seen, "F_OFD_GETLK: %s", strerror(errno));
            return 0;
        }
        pid_t after = getpid();
        if (after != before) continue;
        snprintf(seen, sizeof seen, "type %d pid %d, we are %d", q.l_type, (int)q.l_pid, (int)after);
        return q.l_type == F_WRLCK && q.l_pid == after;
    }
    snprintf(seen, sizeof seen, "the pid changed at each of 5 queries");
    return 0;
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
            FAIL("round %d: the lock just taken is not held (%s)", rounds, seen);
        }
        volatile unsigned long x = (unsigned long)rounds;
        for (int i = 0; i < 200000; i++) x = x * 6364136223846793005ul + 1;
        if (!held_by_us()) {
            FAIL("round %d: the lock was lost while held (%s)", rounds, seen);
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
