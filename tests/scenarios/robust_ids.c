/* robust_ids: robust mutexes held across a move that gives the threads new
 * ids. A robust mutex's lock word and glibc's owner field hold the owner's
 * thread id: its unlock and the kernel (when the owner exits holding it)
 * compare them with the thread's id. The scenario `robust` checks that the
 * ids are kept; this one, moved between nodes that share a pid namespace,
 * runs under new ids and checks that the mutexes follow.
 * Two holder threads each lock a robust mutex and wait. Each check tells
 * the first to unlock (it must succeed, with the owner field naming the
 * thread's id as it is now, and the mutex must then be free) and the second
 * to exit still holding its mutex (locking it must give EOWNERDEAD), then
 * starts both again, so every dump has two holders created before it. */
#include "common.h"
#include <pthread.h>

enum { WAIT, UNLOCK, EXIT };

struct holder {
    pthread_t t;
    pthread_mutex_t m;
    int go;        /* futex: what to do */
    int locked;    /* futex: 1 = holds m */
    int acted;     /* futex: 1 = did what it was told */
    pid_t tid_now; /* its id when told */
    int owner_now; /* the mutex's owner field then */
    int unlock_rc;
};
static struct holder hs[2];

static void *holder_main(void *arg) {
    struct holder *h = arg;
    if (pthread_mutex_lock(&h->m)) return NULL;
    scn_bump_and_wake(&h->locked);
    int go;
    while ((go = __atomic_load_n(&h->go, __ATOMIC_ACQUIRE)) == WAIT) scn_futex(&h->go, FUTEX_WAIT_PRIVATE, WAIT, NULL);
    h->tid_now = scn_gettid();
    h->owner_now = *(volatile int *)&h->m.__data.__owner;
    if (go == UNLOCK) h->unlock_rc = pthread_mutex_unlock(&h->m);
    scn_bump_and_wake(&h->acted);
    return NULL; /* with EXIT, still owning h->m */
}

static int start_holder(struct holder *h) {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&h->m, &a);
    pthread_mutexattr_destroy(&a);
    h->go = WAIT;
    h->locked = h->acted = 0;
    if (pthread_create(&h->t, NULL, holder_main, h)) return 0;
    return scn_wait_at_least(&h->locked, 1, 20.0);
}

static int tell(struct holder *h, int what) {
    __atomic_store_n(&h->go, what, __ATOMIC_RELEASE);
    scn_futex(&h->go, FUTEX_WAKE_PRIVATE, 1, NULL);
    return scn_wait_at_least(&h->acted, 1, 20.0);
}

static int check(void) {
    struct holder *u = &hs[0], *x = &hs[1];
    struct timespec dl;

    CHECK(tell(u, UNLOCK), "the first holder did not answer");
    CHECK(u->owner_now == u->tid_now, "the first holder's mutex names owner %d, the thread is %d", u->owner_now,
          u->tid_now);
    CHECK(u->unlock_rc == 0, "the first holder's unlock gave %d (EPERM: the lock word names another thread)",
          u->unlock_rc);
    CHECK(pthread_join(u->t, NULL) == 0, "join the first holder");
    int r = pthread_mutex_trylock(&u->m);
    CHECK(r == 0, "the unlocked mutex: trylock gave %d", r);
    CHECK(pthread_mutex_unlock(&u->m) == 0, "unlock it again");
    CHECK(pthread_mutex_destroy(&u->m) == 0, "destroy it");

    CHECK(tell(x, EXIT), "the second holder did not answer");
    CHECK(x->owner_now == x->tid_now, "the second holder's mutex names owner %d, the thread is %d", x->owner_now,
          x->tid_now);
    CHECK(pthread_join(x->t, NULL) == 0, "join the second holder");
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 10;
    r = pthread_mutex_timedlock(&x->m, &dl);
    CHECK(r == EOWNERDEAD, "the dead holder's robust mutex: lock gave %d, want EOWNERDEAD (%d)", r, EOWNERDEAD);
    CHECK(pthread_mutex_consistent(&x->m) == 0, "pthread_mutex_consistent");
    CHECK(pthread_mutex_unlock(&x->m) == 0, "unlock");
    CHECK(pthread_mutex_destroy(&x->m) == 0, "destroy");

    CHECK(start_holder(u) && start_holder(x), "new holders did not start");
    return 1;
}

int main(void) {
    scn_name = "robust_ids";
    for (int i = 0; i < 2; i++)
        if (!start_holder(&hs[i])) scn_die("holder %d", i);
    scn_run(check, NULL);
}
