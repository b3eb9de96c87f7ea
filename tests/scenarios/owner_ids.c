/* owner_ids: mutexes that name their owner by thread id, held across a
 * move that gives the threads new ids. Recursive, error-checking and
 * priority-inheritance mutexes compare their owner field (and, with
 * priority inheritance, the lock word) with the thread's id: under a stale
 * id a recursive relock waits for itself and every unlock fails with EPERM,
 * leaving the mutex held for good. The scenario `robust_ids` covers robust
 * mutexes, which the restore finds through their owner's list; these are
 * found in the process's memory.
 * Two holder threads each lock a recursive mutex of static memory (taken
 * twice), an error-checking mutex on the heap and a priority-inheritance
 * mutex in an anonymous mapping, then wait; the main thread holds a
 * recursive mutex of its own between checks. Each holder also locks a
 * mutex that lies across the edge of two pages (error-checking, its owner
 * field in the first page; recursive, its owner field in the second), as
 * a mutex inside a larger structure may, which a lazy destination can
 * install half and half. Each check has the main
 * thread relock and unlock its own, and tells each holder to relock its
 * recursive mutex without waiting (trylock), report its owner field and
 * its id, and unlock everything; then every mutex must be free (the main
 * thread takes and frees each), and new holders start for the next move. */
#define _GNU_SOURCE
#include "common.h"
#include <pthread.h>
#include <sys/mman.h>

enum { WAIT, UNLOCK };

struct holder {
    pthread_t t;
    pthread_mutex_t rec; /* static memory (.bss) */
    pthread_mutex_t *chk; /* heap */
    pthread_mutex_t *pi;  /* an anonymous mapping */
    pthread_mutex_t *edge; /* across two pages of another one */
    int go, locked, acted;
    pid_t tid_now;
    int owner_now;
    int relock_rc, unlock_rc[5];
};
static struct holder hs[2];
static pthread_mutex_t main_rec;
static pthread_mutex_t *pi_area;
static char *edge_area; /* four pages */

static void init_mutex(pthread_mutex_t *m, int type, int protocol) {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, type);
    pthread_mutexattr_setprotocol(&a, protocol);
    pthread_mutex_init(m, &a);
    pthread_mutexattr_destroy(&a);
}

static void *holder_main(void *arg) {
    struct holder *h = arg;
    if (pthread_mutex_lock(&h->rec) || pthread_mutex_lock(&h->rec) || pthread_mutex_lock(h->chk) ||
        pthread_mutex_lock(h->pi) || pthread_mutex_lock(h->edge))
        return NULL;
    scn_bump_and_wake(&h->locked);
    while (__atomic_load_n(&h->go, __ATOMIC_ACQUIRE) == WAIT) scn_futex(&h->go, FUTEX_WAIT_PRIVATE, WAIT, NULL);
    h->tid_now = scn_gettid();
    h->owner_now = *(volatile int *)&h->rec.__data.__owner;
    h->relock_rc = pthread_mutex_trylock(&h->rec);
    h->unlock_rc[0] = pthread_mutex_unlock(&h->rec);
    h->unlock_rc[1] = pthread_mutex_unlock(&h->rec);
    if (h->relock_rc == 0) pthread_mutex_unlock(&h->rec);
    h->unlock_rc[2] = pthread_mutex_unlock(h->chk);
    h->unlock_rc[3] = pthread_mutex_unlock(h->pi);
    h->unlock_rc[4] = pthread_mutex_unlock(h->edge);
    scn_bump_and_wake(&h->acted);
    return NULL;
}

static int start_holder(struct holder *h, int i) {
    init_mutex(&h->rec, PTHREAD_MUTEX_RECURSIVE, PTHREAD_PRIO_NONE);
    if (!h->chk && !(h->chk = malloc(sizeof *h->chk))) return 0;
    init_mutex(h->chk, PTHREAD_MUTEX_ERRORCHECK, PTHREAD_PRIO_NONE);
    h->pi = &pi_area[i];
    init_mutex(h->pi, PTHREAD_MUTEX_NORMAL, PTHREAD_PRIO_INHERIT);
    /* 16 bytes before the edge: the owner field (8 in) in the first page;
     * 8 before: in the second. */
    h->edge = (pthread_mutex_t *)(edge_area + (2 * i + 1) * 4096 - (i ? 8 : 16));
    init_mutex(h->edge, i ? PTHREAD_MUTEX_RECURSIVE : PTHREAD_MUTEX_ERRORCHECK, PTHREAD_PRIO_NONE);
    h->go = WAIT;
    h->locked = h->acted = 0;
    if (pthread_create(&h->t, NULL, holder_main, h)) return 0;
    return scn_wait_at_least(&h->locked, 1, 20.0);
}

/* Nobody holds `m`: the main thread takes it at once and frees it. */
static int is_free(pthread_mutex_t *m) {
    if (pthread_mutex_trylock(m)) return 0;
    return pthread_mutex_unlock(m) == 0 && pthread_mutex_destroy(m) == 0;
}

static int check(void) {
    int r = pthread_mutex_trylock(&main_rec);
    CHECK(r == 0, "the main thread's recursive mutex: its relock gave %d (owner %d, the thread is %d)", r,
          main_rec.__data.__owner, scn_gettid());
    CHECK(pthread_mutex_unlock(&main_rec) == 0 && pthread_mutex_unlock(&main_rec) == 0,
          "the main thread's unlocks failed");
    CHECK(is_free(&main_rec), "the main thread's mutex is still held");
    for (int i = 0; i < 2; i++) {
        struct holder *h = &hs[i];
        __atomic_store_n(&h->go, UNLOCK, __ATOMIC_RELEASE);
        scn_futex(&h->go, FUTEX_WAKE_PRIVATE, 1, NULL);
        CHECK(scn_wait_at_least(&h->acted, 1, 20.0), "holder %d did not answer", i);
        CHECK(pthread_join(h->t, NULL) == 0, "join holder %d", i);
        CHECK(h->owner_now == h->tid_now, "holder %d's recursive mutex names owner %d, the thread is %d", i,
              h->owner_now, h->tid_now);
        CHECK(h->relock_rc == 0, "holder %d's recursive relock gave %d (EBUSY: it names another thread)", i,
              h->relock_rc);
        for (int k = 0; k < 5; k++)
            CHECK(h->unlock_rc[k] == 0, "holder %d's unlock %d gave %d (EPERM: it names another thread)", i, k,
                  h->unlock_rc[k]);
        CHECK(is_free(&h->rec), "holder %d's recursive mutex is still held", i);
        CHECK(is_free(h->chk), "holder %d's error-checking mutex is still held", i);
        CHECK(is_free(h->pi), "holder %d's priority-inheritance mutex is still held", i);
        CHECK(is_free(h->edge), "holder %d's mutex across two pages is still held", i);
    }
    init_mutex(&main_rec, PTHREAD_MUTEX_RECURSIVE, PTHREAD_PRIO_NONE);
    CHECK(pthread_mutex_lock(&main_rec) == 0, "the main thread locks its mutex again");
    for (int i = 0; i < 2; i++) CHECK(start_holder(&hs[i], i), "new holder %d did not start", i);
    return 1;
}

int main(void) {
    scn_name = "owner_ids";
    pi_area = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    edge_area = mmap(NULL, 4 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (pi_area == MAP_FAILED || edge_area == MAP_FAILED) scn_die("mmap");
    init_mutex(&main_rec, PTHREAD_MUTEX_RECURSIVE, PTHREAD_PRIO_NONE);
    if (pthread_mutex_lock(&main_rec)) scn_die("lock");
    for (int i = 0; i < 2; i++)
        if (!start_holder(&hs[i], i)) scn_die("holder %d", i);
    scn_run(check, NULL);
}
