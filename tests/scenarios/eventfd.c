/* eventfd: event counters, checked by reading them and putting back what
 * was read:
 *   counter  count 41, non-blocking, dup'ed onto fd 30 (one open file
 *            description: what one fd reads, the other no longer sees);
 *   sem      semaphore mode with count 3, non-blocking: each read gives 1;
 *   big      a count above 2^32 (eventfd() itself takes only 32 bits). */
#include "common.h"
#include <sys/eventfd.h>

#define DUP_FD 30
#define BIG 0x123456789ULL

static int counter, sem, big;

static int get(int fd, uint64_t *v) {
    return read(fd, v, 8) == 8;
}

static int put(int fd, uint64_t v) {
    return write(fd, &v, 8) == 8;
}

static int check(void) {
    uint64_t v = 0;
    CHECK(get(counter, &v) && v == 41, "counter read %llu, want 41", (unsigned long long)v);
    CHECK(!get(DUP_FD, &v) && errno == EAGAIN, "fd %d still had a count after fd %d was read: not one eventfd", DUP_FD, counter);
    CHECK(put(DUP_FD, 41), "put the counter back");
    for (int i = 0; i < 3; i++) {
        v = 0;
        CHECK(get(sem, &v) && v == 1, "semaphore read %d gave %llu, want 1", i, (unsigned long long)v);
    }
    CHECK(!get(sem, &v) && errno == EAGAIN, "semaphore had more than 3");
    CHECK(put(sem, 3), "put the semaphore back");
    CHECK(get(big, &v) && v == BIG, "big read %#llx, want %#llx", (unsigned long long)v, BIG);
    CHECK(put(big, BIG), "put big back");
    int fl = fcntl(counter, F_GETFL);
    CHECK(fl >= 0 && (fl & O_NONBLOCK), "counter flags %#x: not non-blocking", fl);
    return 1;
}

int main(void) {
    scn_name = "eventfd";
    counter = eventfd(41, EFD_NONBLOCK);
    sem = eventfd(3, EFD_SEMAPHORE | EFD_NONBLOCK);
    big = eventfd(0, EFD_NONBLOCK);
    if (counter < 0 || sem < 0 || big < 0) scn_die("eventfd");
    if (!put(big, BIG)) scn_die("write big");
    if (dup2(counter, DUP_FD) != DUP_FD) scn_die("dup2");
    scn_run(check, NULL);
}
