/* amx: AMX tile state and the permission to use it (x86, Linux 5.16+).
 *   the process:    asked for AMX tile data (ARCH_REQ_XCOMP_PERM); every
 *                   check reads the permission back;
 *   main thread:    tiles 0 and 1 configured and loaded, 16 rows of 64
 *                   bytes each, held across its blocking reads;
 *   second thread:  tile 2 of a configuration of its own (8 rows of 32
 *                   bytes), held across its futex waits;
 *   third thread:   never used AMX before the first check: each check it
 *                   loads, stores and compares a tile (a thread started with
 *                   the permission, first using AMX after a move).
 * A moved copy that lost the permission dies at its first tile instruction
 * (SIGILL); one whose tile state was not set loses its tiles.
 * Without AMX (CPU or kernel) it prints "SKIP amx: ..." instead of READY and
 * exits 0; the harness skips it (pmig_tests::skipped_here). */
#include "common.h"
#include <pthread.h>

#define ARCH_GET_XCOMP_SUPP 0x1021
#define ARCH_GET_XCOMP_PERM 0x1022
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XTILEDATA 18

struct tilecfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((packed));

static void ldtilecfg(const struct tilecfg *c) { __asm__ volatile("ldtilecfg (%0)" : : "r"(c) : "memory"); }
static void sttilecfg(struct tilecfg *c) { __asm__ volatile("sttilecfg (%0)" : : "r"(c) : "memory"); }
/* tileloadd/tilestored take a base and a stride in registers. */
#define TILE_LOAD(n, p, stride) __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #n : : "r"(p), "r"((long)(stride)) : "memory")
#define TILE_STORE(n, p, stride) __asm__ volatile("tilestored %%tmm" #n ", (%0,%1,1)" : : "r"(p), "r"((long)(stride)) : "memory")

static struct tilecfg main_cfg, thr_cfg;
static uint8_t t0[16 * 64], t1[16 * 64], t2[8 * 32];
static char thr_bad[300], third_bad[300];
static int gen, acks, third_ask, third_done;

static int cfg_equal(const struct tilecfg *a, const struct tilecfg *b) { return !memcmp(a, b, sizeof *a); }

static int tile_ok(const char *who, const uint8_t *want, size_t len, uint8_t *got, char *why, size_t cap) {
    if (memcmp(want, got, len)) {
        size_t i = 0;
        while (i < len && want[i] == got[i]) i++;
        snprintf(why, cap, "%s: tile byte %zu is %#x, want %#x", who, i, got[i], want[i]);
        return 0;
    }
    return 1;
}

static void *second(void *arg) {
    (void)arg;
    memset(&thr_cfg, 0, sizeof thr_cfg);
    thr_cfg.palette = 1;
    thr_cfg.colsb[2] = 32;
    thr_cfg.rows[2] = 8;
    ldtilecfg(&thr_cfg);
    scn_fill(t2, sizeof t2, 202);
    TILE_LOAD(2, t2, 32);
    scn_bump_and_wake(&acks);
    for (int round = 1;; round++) {
        while (__atomic_load_n(&gen, __ATOMIC_ACQUIRE) < round) scn_futex(&gen, FUTEX_WAIT_PRIVATE, round - 1, NULL);
        static uint8_t got[8 * 32];
        struct tilecfg c;
        sttilecfg(&c);
        if (!cfg_equal(&c, &thr_cfg)) snprintf(thr_bad, sizeof thr_bad, "second thread: tile configuration changed");
        memset(got, 0, sizeof got);
        TILE_STORE(2, got, 32);
        if (!thr_bad[0]) tile_ok("second thread", t2, sizeof t2, got, thr_bad, sizeof thr_bad);
        scn_bump_and_wake(&acks);
    }
    return NULL;
}

/* Uses AMX only when asked: its first use comes after the first move. */
static void *third(void *arg) {
    (void)arg;
    for (;;) {
        while (!__atomic_load_n(&third_ask, __ATOMIC_ACQUIRE)) scn_futex(&third_ask, FUTEX_WAIT, 0, NULL);
        __atomic_store_n(&third_ask, 0, __ATOMIC_RELEASE);
        struct tilecfg c = {0};
        c.palette = 1;
        c.colsb[5] = 64;
        c.rows[5] = 4;
        static uint8_t in[4 * 64], out[4 * 64];
        scn_fill(in, sizeof in, 303 + (uint64_t)third_done);
        memset(out, 0, sizeof out);
        ldtilecfg(&c);
        TILE_LOAD(5, in, 64);
        TILE_STORE(5, out, 64);
        __asm__ volatile("tilerelease");
        if (!third_bad[0]) tile_ok("third thread", in, sizeof in, out, third_bad, sizeof third_bad);
        scn_bump_and_wake(&third_done);
    }
    return NULL;
}

static int check(void) {
    uint64_t perm = 0;
    CHECK(syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &perm) == 0, "ARCH_GET_XCOMP_PERM: %s", strerror(errno));
    CHECK(perm & (1ULL << XTILEDATA), "permission for AMX tile data lost: %#llx", (unsigned long long)perm);
    struct tilecfg c;
    sttilecfg(&c);
    CHECK(cfg_equal(&c, &main_cfg), "main thread: tile configuration changed (palette %d, tile 0 %d x %d)", c.palette, c.rows[0], c.colsb[0]);
    static uint8_t got[16 * 64];
    memset(got, 0, sizeof got);
    TILE_STORE(0, got, 64);
    if (!tile_ok("main thread, tile 0", t0, sizeof t0, got, scn_reason, sizeof scn_reason)) return 0;
    memset(got, 0, sizeof got);
    TILE_STORE(1, got, 64);
    if (!tile_ok("main thread, tile 1", t1, sizeof t1, got, scn_reason, sizeof scn_reason)) return 0;
    int target = acks + 1;
    scn_bump_and_wake(&gen);
    CHECK(scn_wait_at_least(&acks, target, 20.0), "second thread did not wake within 20s");
    CHECK(!thr_bad[0], "%s", thr_bad);
    CHECK(scn_ask_thread(&third_ask, &third_done), "third thread did not answer within 20s");
    CHECK(!third_bad[0], "%s", third_bad);
    return 1;
}

int main(void) {
    scn_name = "amx";
    uint64_t supp = 0;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("amx-tile") || syscall(SYS_arch_prctl, ARCH_GET_XCOMP_SUPP, &supp) ||
        !(supp & (1ULL << XTILEDATA))) {
        scn_puts("SKIP amx: no AMX here (CPU or kernel)\n");
        return 0;
    }
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XTILEDATA)) scn_die("ARCH_REQ_XCOMP_PERM");
    pthread_t t;
    if (pthread_create(&t, NULL, third, NULL)) scn_die("pthread_create");
    memset(&main_cfg, 0, sizeof main_cfg);
    main_cfg.palette = 1;
    main_cfg.colsb[0] = main_cfg.colsb[1] = 64;
    main_cfg.rows[0] = main_cfg.rows[1] = 16;
    ldtilecfg(&main_cfg);
    scn_fill(t0, sizeof t0, 100);
    scn_fill(t1, sizeof t1, 101);
    TILE_LOAD(0, t0, 64);
    TILE_LOAD(1, t1, 64);
    if (pthread_create(&t, NULL, second, NULL)) scn_die("pthread_create");
    if (!scn_wait_at_least(&acks, 1, 20.0)) scn_die("second thread start");
    scn_run(check, NULL);
}
