/* pthreads: glibc's handles of 4 threads blocked in futex waits keep working
 * even when the migrated process gets new thread ids (its pid was taken at
 * the destination): glibc keeps each thread's id in its descriptor, and
 * pthread_kill, pthread_getaffinity_np and pthread_getattr_np use that copy.
 * Checked for every thread, the main thread included, and against the
 * thread's id as /proc/self/task lists it. */
#include "common.h"
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <dirent.h>

#define NT 4
static int never;                   /* futex word the threads wait on */
static int started;
static pthread_t selfs[NT + 1];

static void *worker(void *arg) {
    (void)arg;
    scn_bump_and_wake(&started);
    for (;;) scn_futex(&never, FUTEX_WAIT_PRIVATE, 0, NULL);
    return NULL;
}

/* Whether /proc/self/task lists thread id `tid`. */
static int listed(pid_t tid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d", tid);
    return access(path, F_OK) == 0;
}

static int check(void) {
    for (int i = 0; i <= NT; i++) {
        int e = pthread_kill(selfs[i], 0);
        CHECK(e == 0, "thread %d: pthread_kill(0): %s", i, strerror(e));
        cpu_set_t set;
        e = pthread_getaffinity_np(selfs[i], sizeof set, &set);
        CHECK(e == 0, "thread %d: pthread_getaffinity_np: %s", i, strerror(e));
        CHECK(CPU_COUNT(&set) > 0, "thread %d: empty affinity", i);
        pthread_attr_t attr;
        e = pthread_getattr_np(selfs[i], &attr);
        CHECK(e == 0, "thread %d: pthread_getattr_np: %s", i, strerror(e));
        size_t size = 0;
        void *stack = NULL;
        e = pthread_attr_getstack(&attr, &stack, &size);
        pthread_attr_destroy(&attr);
        CHECK(e == 0 && size > 0, "thread %d: no stack (%s)", i, strerror(e));
    }
    /* The main thread's own copy names the thread the kernel knows. */
    CHECK(listed(scn_gettid()) && scn_gettid() == getpid(), "main thread id %d, pid %d", scn_gettid(), getpid());
    return 1;
}

int main(void) {
    scn_name = "pthreads";
    selfs[NT] = pthread_self();
    for (int i = 0; i < NT; i++)
        if (pthread_create(&selfs[i], NULL, worker, NULL)) scn_die("pthread_create");
    if (!scn_wait_at_least(&started, NT, 20.0)) scn_die("threads did not start");
    scn_run(check, NULL);
}
