/* threads: 8 threads blocked in different waits (raw futex, pthread_cond_wait,
 * sem_wait, pthread_join of a helper), each with its own TLS pattern, stack
 * pattern, name and TID. On every check they are all woken, verify themselves
 * and report back, then block again. */
#include "common.h"
#include <pthread.h>
#include <semaphore.h>
#include <sys/prctl.h>
#include <dirent.h>

#define NT 8
static int gen;                     /* futex word bumped by each check */
static int acks;                    /* futex word: one increment per report */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static sem_t sem;
static char bad[NT + 2][200];       /* per-thread failure text, "" = ok */
static pid_t tids[NT + 1];
static pthread_t selfs[NT + 1];
static _Thread_local uint64_t tls[64];
static _Thread_local int tls_idx = -1;

static void tls_set(int idx) {
    tls_idx = idx;
    for (int i = 0; i < 64; i++) tls[i] = scn_pat(1000 + (uint64_t)idx, (uint64_t)i);
}
static int self_ok(int idx, const char *name, volatile uint64_t *stk, char *why) {
    if (tls_idx != idx) return sprintf(why, "thread %d: TLS index %d", idx, tls_idx), 0;
    for (int i = 0; i < 64; i++)
        if (tls[i] != scn_pat(1000 + (uint64_t)idx, (uint64_t)i)) return sprintf(why, "thread %d: TLS word %d", idx, i), 0;
    for (int i = 0; i < 32; i++)
        if (stk[i] != scn_pat(2000 + (uint64_t)idx, (uint64_t)i)) return sprintf(why, "thread %d: stack word %d", idx, i), 0;
    char now[16] = {0};
    prctl(PR_GET_NAME, now);
    if (strcmp(now, name)) return sprintf(why, "thread %d: name '%s', want '%s'", idx, now, name), 0;
    return 1;
}

static void report(int idx, const char *name, volatile uint64_t *stk) {
    bad[idx][0] = 0;
    self_ok(idx, name, stk, bad[idx]);
    if (!bad[idx][0] && idx < NT && scn_gettid() != tids[idx]) sprintf(bad[idx], "thread %d: tid %d, was %d", idx, scn_gettid(), tids[idx]);
    if (!bad[idx][0] && idx < NT && !pthread_equal(pthread_self(), selfs[idx])) sprintf(bad[idx], "thread %d: pthread_self changed", idx);
    scn_bump_and_wake(&acks);
}

static void setup_self(int idx, char *name, volatile uint64_t *stk) {
    snprintf(name, 16, idx < NT ? "scn-w%d" : "scn-helper", idx);
    prctl(PR_SET_NAME, name);
    tls_set(idx);
    for (int i = 0; i < 32; i++) stk[i] = scn_pat(2000 + (uint64_t)idx, (uint64_t)i);
    if (idx < NT) { tids[idx] = scn_gettid(); selfs[idx] = pthread_self(); }
}

static void *helper(void *arg) {            /* waited for by thread 6 via pthread_join */
    int seen = (int)(intptr_t)arg;
    char name[16]; volatile uint64_t stk[32];
    setup_self(NT, name, stk);
    while (__atomic_load_n(&gen, __ATOMIC_ACQUIRE) == seen) scn_futex(&gen, FUTEX_WAIT_PRIVATE, seen, NULL);
    bad[NT][0] = 0;
    self_ok(NT, name, stk, bad[NT]);
    return NULL;
}

static void *worker(void *arg) {
    int idx = (int)(intptr_t)arg;
    char name[16]; volatile uint64_t stk[32];
    setup_self(idx, name, stk);
    int seen = 0;
    pthread_t h;
    if (idx == 6 && pthread_create(&h, NULL, helper, (void *)(intptr_t)seen)) scn_die("pthread_create helper");
    scn_bump_and_wake(&acks);               /* started */
    for (;;) {
        if (idx < 3) {                      /* raw futex wait */
            while (__atomic_load_n(&gen, __ATOMIC_ACQUIRE) == seen) scn_futex(&gen, FUTEX_WAIT_PRIVATE, seen, NULL);
        } else if (idx < 6) {               /* condition variable */
            pthread_mutex_lock(&mu);
            while (__atomic_load_n(&gen, __ATOMIC_ACQUIRE) == seen) pthread_cond_wait(&cv, &mu);
            pthread_mutex_unlock(&mu);
        } else if (idx == 6) {              /* join a helper that exits on wake-up */
            pthread_join(h, NULL);
        } else {                            /* semaphore */
            while (sem_wait(&sem) && errno == EINTR) {}
        }
        seen = __atomic_load_n(&gen, __ATOMIC_ACQUIRE);
        if (idx == 6 && pthread_create(&h, NULL, helper, (void *)(intptr_t)seen)) scn_die("pthread_create helper");
        report(idx, name, stk);
    }
}

static int count_tasks(void) {
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static int check(void) {
    CHECK(count_tasks() == NT + 2, "%d tasks, want %d", count_tasks(), NT + 2);
    for (int i = 0; i < NT; i++) {
        char path[64], comm[32], want[32];
        snprintf(path, sizeof path, "/proc/self/task/%d/comm", tids[i]);
        snprintf(want, sizeof want, "scn-w%d\n", i);
        CHECK(scn_read_file(path, comm, sizeof comm) > 0, "thread %d (tid %d) is gone", i, tids[i]);
        CHECK(strcmp(comm, want) == 0, "thread %d comm '%s'", i, comm);
    }
    char why[200] = "";
    volatile uint64_t stk[32];
    for (int i = 0; i < 32; i++) stk[i] = scn_pat(2000 + NT + 1, (uint64_t)i);
    CHECK(self_ok(NT + 1, "threads", stk, why), "main: %s", why);
    int target = __atomic_load_n(&acks, __ATOMIC_ACQUIRE) + NT;
    pthread_mutex_lock(&mu);
    scn_bump_and_wake(&gen);
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    sem_post(&sem);
    CHECK(scn_wait_at_least(&acks, target, 20.0), "only %d of %d threads woke up within 20s",
          NT - (target - acks), NT);
    for (int i = 0; i <= NT; i++) CHECK(!bad[i][0], "%s", bad[i]);
    return 1;
}

int main(void) {
    scn_name = "threads";
    prctl(PR_SET_NAME, "threads");
    tls_set(NT + 1);
    if (sem_init(&sem, 0, 0)) scn_die("sem_init");
    for (int i = 0; i < NT; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, worker, (void *)(intptr_t)i)) scn_die("pthread_create");
    }
    if (!scn_wait_at_least(&acks, NT, 20.0)) scn_die("threads did not start");
    scn_run(check, NULL);
}
