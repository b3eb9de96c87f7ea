/*
 * randomaccess.c - RandomAccess (GUPS), one of the HPC Challenge kernels
 * used in AMPoM's evaluation (Ho, Wang, Lau): read-modify-write xor updates
 * at random places of a large table, with no spatial locality at all (the
 * case where AMPoM's prefetching helps least: 85 % of faults prevented).
 *
 * The table is the largest power of two of 64-bit words that fits in --mib
 * (default 64), filled with seeded random values.  Updates follow HPCC's
 * generator, the LFSR ran = (ran << 1) ^ (ran < 0 ? 7 : 0), and do
 * T[ran & (size-1)] ^= ran.  One iteration = 1024 updates.
 *
 * Verification as in HPCC: the same updates are applied a second time
 * (xor is its own inverse), which must give back the initial table exactly
 * (HPCC tolerates 1 % errors because of races between processors; this
 * program is sequential and tolerates none).  The checksum hashes the table
 * as it was at the end of the work.
 */
#include "common.h"

#define RA_POLY 0x0000000000000007ull
#define RA_BATCH 1024

static inline uint64_t ra_next(uint64_t ran)
{
    return (ran << 1) ^ ((int64_t)ran < 0 ? RA_POLY : 0);
}

int main(int argc, char **argv)
{
    wl_t w;
    wl_parse(&w, "randomaccess", argc, argv, NULL, NULL,
             "  (default --mib 64; table = largest power of two of words that fits;\n"
             "   one iteration = 1024 updates)\n");
    size_t bytes = w.bytes ? w.bytes : 64u << 20;
    size_t words = 1024;
    while (words * 2 * 8 <= bytes)
        words *= 2;
    const uint64_t mask = words - 1;
    uint64_t *t = wl_alloc(&w, words * 8);
    const uint64_t key = wl_mix(w.seed + 61);
    for (size_t i = 0; i < words; i++)
        t[i] = wl_rand_at(key, i);
    const uint64_t ran0 = wl_mix(w.seed + 62) | 1;
    uint64_t ran = ran0;

    wl_ready(&w);
    while (wl_more(&w)) {
        for (int k = 0; k < RA_BATCH; k++) {
            ran = ra_next(ran);
            t[ran & mask] ^= ran;
        }
        w.iter++;
    }
    wl_work_done(&w);

    wl_hash_t h;
    wl_hash_init(&h, w.seed);
    wl_hash_words(&h, t, words);
    wl_hash_u64(&h, w.iter);
    uint64_t checksum = wl_hash_final(&h);

    wl_maybe_inject(&w, t, words * 8);
    /* re-apply every update */
    ran = ran0;
    for (uint64_t it = 0; it < w.iter; it++) {
        for (int k = 0; k < RA_BATCH; k++) {
            ran = ra_next(ran);
            t[ran & mask] ^= ran;
        }
    }
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < words; i++)
        if (t[i] != wl_rand_at(key, i) && !bad++)
            first = i;
    char reason[128];
    const char *why = NULL;
    if (bad) {
        snprintf(reason, sizeof reason, "table_errors=%zu of %zu first=%zu", bad, words, first);
        why = reason;
    }
    return wl_finish(&w, checksum, why);
}
