/* loader: a thread holds the dynamic loader's lock across the migration.
 * dl_iterate_phdr runs its callback under the loader's recursive lock, and
 * glibc's recursive locks name their owner by thread id. When the migrated
 * process gets new thread ids, the holder's unlock must still work and
 * other threads must be able to take the lock after it (a program moved
 * while inside dlopen, as python3 is while it imports a C module, needs
 * the same of the loader's other lock).
 * Each check releases the holder started before the last dump, runs
 * dl_iterate_phdr in a fresh thread (which must finish in bounded time),
 * and starts a new holder, so every dump has one inside the lock. */
#include "common.h"
#include <link.h>
#include <pthread.h>

static struct {
    pthread_t t;
    int go;      /* futex: 1 = leave the callback */
    int inside;  /* futex: 1 = in the callback, holding the lock */
    int done;    /* futex: 1 = dl_iterate_phdr returned */
    int rc;
} h;

static int walked;       /* futex: 1 = the walker's dl_iterate_phdr returned */
static int walked_objs;

static int hold_cb(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)info, (void)size, (void)arg;
    scn_bump_and_wake(&h.inside);
    while (!__atomic_load_n(&h.go, __ATOMIC_ACQUIRE)) scn_futex(&h.go, FUTEX_WAIT_PRIVATE, 0, NULL);
    return 7; /* stop the walk: dl_iterate_phdr returns it */
}

static void *holder(void *arg) {
    (void)arg;
    h.rc = dl_iterate_phdr(hold_cb, NULL);
    scn_bump_and_wake(&h.done);
    return NULL;
}

static int count_cb(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)info, (void)size, (void)arg;
    walked_objs++;
    return 0;
}

static void *walker(void *arg) {
    (void)arg;
    dl_iterate_phdr(count_cb, NULL);
    scn_bump_and_wake(&walked);
    return NULL;
}

static int start_holder(void) {
    memset(&h, 0, sizeof h);
    if (pthread_create(&h.t, NULL, holder, NULL)) return 0;
    return scn_wait_at_least(&h.inside, 1, 20.0);
}

static int check(void) {
    __atomic_store_n(&h.go, 1, __ATOMIC_RELEASE);
    scn_futex(&h.go, FUTEX_WAKE_PRIVATE, 1, NULL);
    CHECK(scn_wait_at_least(&h.done, 1, 20.0), "the holder did not leave dl_iterate_phdr");
    CHECK(h.rc == 7, "the holder's dl_iterate_phdr returned %d, want 7", h.rc);
    CHECK(pthread_join(h.t, NULL) == 0, "join the holder");
    walked = 0;
    walked_objs = 0;
    pthread_t w;
    CHECK(pthread_create(&w, NULL, walker, NULL) == 0, "start the walker");
    CHECK(scn_wait_at_least(&walked, 1, 10.0),
          "dl_iterate_phdr in another thread did not return in 10 s: the loader's lock is still held "
          "(by its holder's old thread id?)");
    CHECK(pthread_join(w, NULL) == 0, "join the walker");
    CHECK(walked_objs >= 2, "the walker saw %d loaded objects", walked_objs);
    CHECK(start_holder(), "a new holder did not enter dl_iterate_phdr");
    return 1;
}

int main(void) {
    scn_name = "loader";
    if (!start_holder()) scn_die("the holder did not enter dl_iterate_phdr");
    scn_run(check, NULL);
}
