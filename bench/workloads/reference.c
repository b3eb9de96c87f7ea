/*
 * reference.c - Noack's "reference process" (Comparative Evaluation of
 * Process Migration Algorithms, ch. 5; the 100 KB process of his
 * cross-system down-time comparison): a small process (default 100 KiB of
 * data) that rewrites all of its pages and computes, over and over.
 *
 * One iteration = one pass over the whole buffer: every word is replaced
 * by a mix of itself, the word just written before it and the iteration
 * number (a sequential dependency chain, so it really computes), and a
 * running result folds every new word.  Verification: the position-aware
 * memory sum kept up to date on every write must match the memory.
 */
#include "common.h"

int main(int argc, char **argv)
{
    wl_t w;
    wl_parse(&w, "reference", argc, argv, NULL, NULL,
             "  (default --kib 100)\n");
    size_t bytes = w.bytes ? w.bytes : 100u * 1024;
    size_t nwords = bytes / 8;
    if (nwords < 64)
        nwords = 64;
    bytes = nwords * 8;

    uint64_t *m = wl_alloc(&w, bytes);
    uint64_t sum = wl_fill_random(m, nwords, w.seed, 21);
    uint64_t result = wl_mix(w.seed);

    wl_ready(&w);
    while (wl_more(&w)) {
        uint64_t prev = m[nwords - 1];
        uint64_t it = w.iter;
        for (size_t base = 0; base < nwords; base += 4096) {
            size_t end = base + 4096 < nwords ? base + 4096 : nwords;
            for (size_t i = base; i < end; i++) {
                uint64_t old = m[i];
                uint64_t v = wl_mix(old ^ wl_rotl(prev, 7)) + it;
                sum += wl_cell(i, v) - wl_cell(i, old);
                m[i] = v;
                prev = v;
                result = wl_rotl(result, 5) ^ v;
            }
            if (end < nwords)
                wl_poll(&w);
        }
        w.iter++;
    }
    wl_work_done(&w);

    wl_hash_t h;
    wl_hash_init(&h, w.seed);
    wl_hash_words(&h, m, nwords);
    wl_hash_u64(&h, result);
    wl_hash_u64(&h, w.iter);
    uint64_t checksum = wl_hash_final(&h);

    wl_maybe_inject(&w, m, bytes);
    uint64_t got = wl_cell_sum(m, nwords);
    char reason[128];
    const char *why = NULL;
    if (got != sum) {
        snprintf(reason, sizeof reason, "memory_sum expected=%016llx got=%016llx",
                 (unsigned long long)sum, (unsigned long long)got);
        why = reason;
    }
    return wl_finish(&w, checksum, why);
}
