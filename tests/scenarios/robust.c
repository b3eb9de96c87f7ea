/* robust: robust mutexes and clear_child_tid. Holder threads each lock a
 * robust mutex and block in a futex wait. Every check releases the oldest
 * holder (created before the last dump), which exits still owning its mutex:
 * pthread_join must return (the kernel clears and wakes clear_child_tid) and
 * locking the mutex must give EOWNERDEAD (the kernel walked the robust list).
 * A new holder replaces it, so each dump has holders created before it. */
#include "common.h"
#include <pthread.h>

#define POOL 2
struct holder {
    pthread_t t;
    pthread_mutex_t m;
    int go;        /* futex: 1 = exit now */
    int locked;    /* futex: 1 = holds m */
    pid_t tid;     /* when it locked m */
    pid_t tid_at_exit;
};
static struct holder hs[POOL];
static int next;   /* index of the oldest holder */

static void *holder_main(void *arg) {
    struct holder *h = arg;
    if (pthread_mutex_lock(&h->m)) return NULL;
    h->tid = scn_gettid();
    scn_bump_and_wake(&h->locked);
    while (!__atomic_load_n(&h->go, __ATOMIC_ACQUIRE)) scn_futex(&h->go, FUTEX_WAIT_PRIVATE, 0, NULL);
    h->tid_at_exit = scn_gettid();
    return (void *)0x5eed;  /* exit while still owning h->m */
}

static int start_holder(struct holder *h) {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&h->m, &a);
    pthread_mutexattr_destroy(&a);
    h->go = 0;
    h->locked = 0;
    if (pthread_create(&h->t, NULL, holder_main, h)) return 0;
    return scn_wait_at_least(&h->locked, 1, 20.0);
}

static int check(void) {
    struct holder *h = &hs[next];
    struct timespec dl;
    /* the lock is held by a live thread: a short timed lock must time out */
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_nsec += 1000000;
    if (dl.tv_nsec >= 1000000000) { dl.tv_sec++; dl.tv_nsec -= 1000000000; }
    int r = pthread_mutex_timedlock(&h->m, &dl);
    CHECK(r == ETIMEDOUT, "lock held by live holder (tid %d): timedlock gave %d", h->tid, r);
    CHECK(*(volatile int *)&h->m.__data.__owner == h->tid, "mutex owner %d, want %d", h->m.__data.__owner, h->tid);
    __atomic_store_n(&h->go, 1, __ATOMIC_RELEASE);
    scn_futex(&h->go, FUTEX_WAKE_PRIVATE, 1, NULL);
    void *ret = NULL;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 20;
    r = pthread_timedjoin_np(h->t, &ret, &dl);
    CHECK(r == 0, "pthread_join of exiting holder failed (%d): clear_child_tid not honoured?", r);
    CHECK(ret == (void *)0x5eed, "holder returned %p", ret);
    CHECK(h->tid_at_exit == h->tid, "holder's tid changed from %d to %d (the mutex owner field no longer matches)",
          h->tid, h->tid_at_exit);
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 20;
    r = pthread_mutex_timedlock(&h->m, &dl);
    CHECK(r == EOWNERDEAD, "lock of dead holder's robust mutex gave %d, want EOWNERDEAD", r);
    CHECK(pthread_mutex_consistent(&h->m) == 0, "pthread_mutex_consistent");
    CHECK(pthread_mutex_unlock(&h->m) == 0, "unlock");
    CHECK(pthread_mutex_destroy(&h->m) == 0, "destroy");
    CHECK(start_holder(h), "replacement holder did not start");
    next = (next + 1) % POOL;
    return 1;
}

int main(void) {
    scn_name = "robust";
    for (int i = 0; i < POOL; i++)
        if (!start_holder(&hs[i])) scn_die("holder %d", i);
    scn_run(check, NULL);
}
