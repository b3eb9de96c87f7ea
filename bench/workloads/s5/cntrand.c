// LD_PRELOAD library: counts rand() calls, and prints the count at exit.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
static unsigned long calls;
static int (*real_rand)(void);
int rand(void) {
    if (!real_rand) real_rand = (int (*)(void))dlsym(RTLD_NEXT, "rand");
    calls++;
    return real_rand();
}
__attribute__((destructor)) static void report(void) { printf("preload: rand called %lu times\n", calls); fflush(stdout); }
