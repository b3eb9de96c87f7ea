// Holds a recursive and an error-checking pthread mutex across the migration window, then
// re-locks the recursive one and unlocks both: glibc keys both on the owner's kernel TID.
// Usage: recmutex ROUNDS [thread|chkonly]   ("thread": a second thread holds them, main joins it;
// "chkonly": no recursive relock, just unlock both and print the results)
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <pthread.h>
static pthread_mutex_t rec, chk;
static long rounds; static int chkonly;
static void *body(void *arg) {
    (void)arg;
    printf("lock rec %d\n", pthread_mutex_lock(&rec));
    printf("lock chk %d\n", pthread_mutex_lock(&chk));
    fflush(stdout);
    uint64_t x = 1, s = 0;
    for (long r = 0; r < rounds; r++) {
        for (long i = 0; i < 50000000; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; s += x >> 60; }
        printf("round %ld %llx\n", r, (unsigned long long)s); fflush(stdout);
    }
    if (!chkonly) {
        printf("relock rec %d\n", pthread_mutex_lock(&rec)); fflush(stdout);
        int u1 = pthread_mutex_unlock(&rec), u2 = pthread_mutex_unlock(&rec);
        printf("unlock rec %d %d\n", u1, u2);
    } else printf("unlock rec %s\n", strerror(pthread_mutex_unlock(&rec)));
    printf("unlock chk %s\n", strerror(pthread_mutex_unlock(&chk)));
    fflush(stdout);
    return NULL;
}
int main(int argc, char **argv) {
    rounds = argc > 1 ? atol(argv[1]) : 40;
    chkonly = argc > 2 && !strcmp(argv[2], "chkonly");
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a); pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE); pthread_mutex_init(&rec, &a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK); pthread_mutex_init(&chk, &a);
    if (argc > 2 && !strcmp(argv[2], "thread")) { pthread_t t; pthread_create(&t, NULL, body, NULL); pthread_join(t, NULL); }
    else body(NULL);
    printf("done\n");
    return 0;
}
