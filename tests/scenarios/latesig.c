/* latesig: reports every SIGUSR1, SIGUSR2 and SIGRTMIN+1 it receives, one
 * line each on stdout ("GOT USR1 code C" / "GOT USR2 code C on T" / "GOT RT
 * value V code C"), written from the handler; T says which thread handled
 * it ("main" or "worker", a thread-local mark the thread keeps whatever its
 * id). The worker thread, started before READY, prints "WORKER <tid>" and
 * waits, with SIGUSR1 and SIGRTMIN+1 blocked. Used by the multi-node test
 * of signals sent to a moved process's old pid while its frozen original
 * still exists (they must reach the copy, in order, with their values, and
 * one sent to the worker by its old id must be handled by the worker); its
 * check only says it is alive. */
#include "common.h"
#include <pthread.h>
#include <signal.h>

static __thread int on_worker;
static int worker_started;

static void put_num(char *buf, size_t *n, long v) {
    char tmp[24];
    int k = 0;
    int neg = v < 0;
    unsigned long u = neg ? (unsigned long)(-v) : (unsigned long)v;
    do tmp[k++] = (char)('0' + u % 10); while ((u /= 10) && k < 23);
    if (neg) buf[(*n)++] = '-';
    while (k) buf[(*n)++] = tmp[--k];
}

static void on_signal(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    char buf[96];
    size_t n = 0;
    const char *head = sig == SIGUSR1 ? "GOT USR1" : sig == SIGUSR2 ? "GOT USR2" : "GOT RT value ";
    memcpy(buf, head, strlen(head));
    n = strlen(head);
    if (sig != SIGUSR1 && sig != SIGUSR2) put_num(buf, &n, (long)si->si_value.sival_int);
    memcpy(buf + n, " code ", 6);
    n += 6;
    put_num(buf, &n, si->si_code);
    if (sig == SIGUSR2) {
        const char *who = on_worker ? " on worker" : " on main";
        memcpy(buf + n, who, strlen(who));
        n += strlen(who);
    }
    buf[n++] = '\n';
    scn_write_all(1, buf, n);
}

static int check(void) { return 1; }

static void *worker(void *arg) {
    (void)arg;
    on_worker = 1;
    /* The signals sent to the process are the main thread's alone: they are
     * handled in the order they come. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGRTMIN + 1);
    if (pthread_sigmask(SIG_BLOCK, &set, NULL)) scn_die("pthread_sigmask");
    char buf[48];
    size_t n = 7;
    memcpy(buf, "WORKER ", 7);
    put_num(buf, &n, (long)syscall(SYS_gettid));
    buf[n++] = '\n';
    scn_write_all(1, buf, n);
    __atomic_store_n(&worker_started, 1, __ATOMIC_RELEASE);
    for (;;) pause();
    return NULL;
}

int main(void) {
    scn_name = "latesig";
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigfillset(&sa.sa_mask);
    if (sigaction(SIGUSR1, &sa, NULL) || sigaction(SIGUSR2, &sa, NULL) ||
        sigaction(SIGRTMIN + 1, &sa, NULL))
        scn_die("sigaction");
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL)) scn_die("pthread_create");
    /* READY only once the worker has said its id (bounded: 10 s). */
    for (int i = 0; i < 10000 && !__atomic_load_n(&worker_started, __ATOMIC_ACQUIRE); i++) {
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (!__atomic_load_n(&worker_started, __ATOMIC_ACQUIRE)) scn_die("the worker did not start");
    scn_run(check, NULL);
}
