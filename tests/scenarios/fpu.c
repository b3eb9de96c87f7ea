/* fpu: register state held across the blocking syscalls.
 * Every read(0) of the command loop is issued from inline asm that loads
 * xmm0-15 (SSE), ymm0-15 (AVX) or zmm0-31 + k1-7 (AVX-512), whichever the CPU
 * has (cpuid check at run time), plus 8 x87 stack values, then does the
 * syscall and stores them back; they must be unchanged. A second thread does
 * the same around a futex wait. Also: MXCSR (round-toward-zero, FTZ, DAZ) and
 * the x87 control word (53-bit precision, round-toward-zero) must persist. */
#include "common.h"
#include <pthread.h>

struct regs { uint8_t v[32][64]; double x[8]; uint16_t k[8]; } __attribute__((aligned(64)));
enum { SSE, AVX, AVX512 };
static int kind;
static const char *kind_name[] = {"sse", "avx", "avx512"};
static char bad[300];
static int gen, acks;
static const unsigned want_mxcsr = 0x7f80 | 0x6000 | 0x8000 | 0x40; /* masks, RZ, FTZ, DAZ */
static const unsigned short want_cw = (0x037f & ~0x0300) | 0x0200 /* 53-bit precision */ | 0x0c00 /* RZ */;

#define X87_LOAD "fldl 2048(%[i])\n fldl 2056(%[i])\n fldl 2064(%[i])\n fldl 2072(%[i])\n fldl 2080(%[i])\n fldl 2088(%[i])\n fldl 2096(%[i])\n fldl 2104(%[i])\n"
#define X87_STORE "fstpl 2104(%[o])\n fstpl 2096(%[o])\n fstpl 2088(%[o])\n fstpl 2080(%[o])\n fstpl 2072(%[o])\n fstpl 2064(%[o])\n fstpl 2056(%[o])\n fstpl 2048(%[o])\n"
#define X87_CLOB "st", "st(1)", "st(2)", "st(3)", "st(4)", "st(5)", "st(6)", "st(7)"
#define XC0_15 "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15"
#define XC16_31 "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", "xmm25", "xmm26", "xmm27", "xmm28", "xmm29", "xmm30", "xmm31"
#define L8(op, reg, n) #op " " #n "*64(%[i]), %%" #reg #n "\n"
#define S8(op, reg, n) #op " %%" #reg #n ", " #n "*64(%[o])\n"
#define R16(M, op, reg) M(op, reg, 0) M(op, reg, 1) M(op, reg, 2) M(op, reg, 3) M(op, reg, 4) M(op, reg, 5) M(op, reg, 6) M(op, reg, 7) \
    M(op, reg, 8) M(op, reg, 9) M(op, reg, 10) M(op, reg, 11) M(op, reg, 12) M(op, reg, 13) M(op, reg, 14) M(op, reg, 15)
#define R16H(M, op, reg) M(op, reg, 16) M(op, reg, 17) M(op, reg, 18) M(op, reg, 19) M(op, reg, 20) M(op, reg, 21) M(op, reg, 22) M(op, reg, 23) \
    M(op, reg, 24) M(op, reg, 25) M(op, reg, 26) M(op, reg, 27) M(op, reg, 28) M(op, reg, 29) M(op, reg, 30) M(op, reg, 31)
#define KL(n) "kmovw 2112+2*" #n "(%[i]), %%k" #n "\n"
#define KS(n) "kmovw %%k" #n ", 2112+2*" #n "(%[o])\n"
#define ARGS "+a"(rax) : "D"(a), "S"(b), "d"(c), "r"(r10), [i] "r"(in), [o] "r"(out)

static long sys_sse(long nr, long a, long b, long c, long d, struct regs *in, struct regs *out) {
    register long rax __asm__("rax") = nr;
    register long r10 __asm__("r10") = d;
    __asm__ volatile(X87_LOAD R16(L8, movdqu, xmm) "syscall\n" R16(S8, movdqu, xmm) X87_STORE
                     : ARGS : "rcx", "r11", "memory", XC0_15, X87_CLOB);
    return rax;
}
__attribute__((target("avx"))) static long sys_avx(long nr, long a, long b, long c, long d, struct regs *in, struct regs *out) {
    register long rax __asm__("rax") = nr;
    register long r10 __asm__("r10") = d;
    __asm__ volatile(X87_LOAD R16(L8, vmovdqu, ymm) "syscall\n" R16(S8, vmovdqu, ymm) X87_STORE
                     : ARGS : "rcx", "r11", "memory", XC0_15, X87_CLOB);
    return rax;
}
__attribute__((target("avx512f"))) static long sys_avx512(long nr, long a, long b, long c, long d, struct regs *in, struct regs *out) {
    register long rax __asm__("rax") = nr;
    register long r10 __asm__("r10") = d;
    __asm__ volatile(X87_LOAD R16(L8, vmovdqu64, zmm) R16H(L8, vmovdqu64, zmm) KL(1) KL(2) KL(3) KL(4) KL(5) KL(6) KL(7)
                     "syscall\n" R16(S8, vmovdqu64, zmm) R16H(S8, vmovdqu64, zmm) KS(1) KS(2) KS(3) KS(4) KS(5) KS(6) KS(7) X87_STORE
                     : ARGS : "rcx", "r11", "memory", XC0_15, XC16_31, X87_CLOB, "k1", "k2", "k3", "k4", "k5", "k6", "k7");
    return rax;
}

/* One syscall with live vector/x87 registers around it; compares afterwards. */
static long sys_with_regs(const char *who, uint64_t seed, long nr, long a, long b, long c, long d) {
    static _Thread_local struct regs in, out;
    scn_fill(&in, sizeof in, seed);
    for (int i = 0; i < 8; i++) in.x[i] = (double)seed * 1.5 + i + 0.125;
    memcpy(&out, &in, sizeof out);
    memset(out.v, 0, sizeof out.v);
    memset(out.x, 0, sizeof out.x);
    memset(out.k, 0, sizeof out.k);
    long r = kind == AVX512 ? sys_avx512(nr, a, b, c, d, &in, &out)
           : kind == AVX    ? sys_avx(nr, a, b, c, d, &in, &out)
                            : sys_sse(nr, a, b, c, d, &in, &out);
    int nv = kind == AVX512 ? 32 : 16, w = kind == AVX512 ? 64 : kind == AVX ? 32 : 16;
    for (int i = 0; i < nv && !bad[0]; i++)
        if (memcmp(in.v[i], out.v[i], (size_t)w))
            snprintf(bad, sizeof bad, "%s: %s register %d changed across syscall %ld", who, kind_name[kind], i, nr);
    for (int i = 0; i < 8 && !bad[0]; i++)
        if (in.x[i] != out.x[i]) snprintf(bad, sizeof bad, "%s: x87 st(%d) %g, want %g", who, 7 - i, out.x[i], in.x[i]);
    for (int i = 1; i < 8 && kind == AVX512 && !bad[0]; i++)
        if (in.k[i] != out.k[i]) snprintf(bad, sizeof bad, "%s: k%d changed", who, i);
    if (r < 0) { errno = (int)-r; return -1; }
    return r;
}

static ssize_t read_with_regs(int fd, void *buf, size_t n) {
    static uint64_t calls;
    return sys_with_regs("main", ++calls, SYS_read, fd, (long)buf, (long)n, 0);
}

static int ctl_ok(const char *who, char *why, size_t cap) {
    unsigned mx;
    unsigned short cw;
    __asm__ volatile("stmxcsr %0\n fnstcw %1" : "=m"(mx), "=m"(cw));
    if ((mx & 0xffc0) != (want_mxcsr & 0xffc0) || !(mx & 0x40))
        return snprintf(why, cap, "%s: MXCSR %#x, want %#x", who, mx, want_mxcsr), 0;
    if ((cw & 0x0f3f) != (want_cw & 0x0f3f)) return snprintf(why, cap, "%s: x87 control word %#x, want %#x", who, cw, want_cw), 0;
    volatile double x = 2.0, y = 3.0;
    if (x / y != 0x1.5555555555555p-1) return snprintf(why, cap, "%s: 2.0/3.0 not rounded toward zero", who), 0;
    return 1;
}

static void set_ctl(void) {
    unsigned mx = want_mxcsr;
    unsigned short cw = want_cw;
    __asm__ volatile("ldmxcsr %0\n fldcw %1" : : "m"(mx), "m"(cw));
}

static char thr_bad[300];
static void *thr(void *arg) {
    (void)arg;
    set_ctl();
    scn_bump_and_wake(&acks);
    for (uint64_t round = 1;; round++) {
        int seen = (int)round - 1;
        while (__atomic_load_n(&gen, __ATOMIC_ACQUIRE) == seen)
            sys_with_regs("thread", 1000 + round, SYS_futex, (long)&gen, FUTEX_WAIT_PRIVATE, seen, 0);
        ctl_ok("thread", thr_bad, sizeof thr_bad);
        scn_bump_and_wake(&acks);
    }
    return NULL;
}

static int check(void) {
    CHECK(!bad[0], "%s", bad);
    CHECK(!thr_bad[0], "%s", thr_bad);
    if (!ctl_ok("main", scn_reason, sizeof scn_reason)) return 0;
    int target = acks + 1;
    scn_bump_and_wake(&gen);
    CHECK(scn_wait_at_least(&acks, target, 20.0), "thread did not wake within 20s");
    CHECK(!bad[0], "%s", bad);
    CHECK(!thr_bad[0], "%s", thr_bad);
    return 1;
}

int main(void) {
    scn_name = "fpu";
    __builtin_cpu_init();
    kind = __builtin_cpu_supports("avx512f") ? AVX512 : __builtin_cpu_supports("avx") ? AVX : SSE;
    char msg[64];
    snprintf(msg, sizeof msg, "fpu: testing %s + x87\n", kind_name[kind]);
    scn_write_all(2, msg, strlen(msg));
    set_ctl();
    pthread_t t;
    if (pthread_create(&t, NULL, thr, NULL)) scn_die("pthread_create");
    if (!scn_wait_at_least(&acks, 1, 20.0)) scn_die("thread start");
    scn_run(check, read_with_regs);
}
