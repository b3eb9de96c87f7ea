/* latesig: reports every SIGUSR1 and SIGRTMIN+1 it receives, one line each
 * on stdout ("GOT USR1 code C" / "GOT RT value V code C"), written from the
 * handler. Used by the multi-node test of signals sent to a moved process's
 * old pid while its frozen original still exists (they must reach the copy,
 * in order, with their values); its check only says it is alive. */
#include "common.h"
#include <signal.h>

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
    const char *head = sig == SIGUSR1 ? "GOT USR1" : "GOT RT value ";
    memcpy(buf, head, strlen(head));
    n = strlen(head);
    if (sig != SIGUSR1) put_num(buf, &n, (long)si->si_value.sival_int);
    memcpy(buf + n, " code ", 6);
    n += 6;
    put_num(buf, &n, si->si_code);
    buf[n++] = '\n';
    scn_write_all(1, buf, n);
}

static int check(void) { return 1; }

int main(void) {
    scn_name = "latesig";
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigfillset(&sa.sa_mask);
    if (sigaction(SIGUSR1, &sa, NULL) || sigaction(SIGRTMIN + 1, &sa, NULL)) scn_die("sigaction");
    scn_run(check, NULL);
}
