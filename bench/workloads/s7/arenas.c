// glibc's allocator under four threads: blocks from 16 B to 4 MiB are
// allocated, filled, grown and shrunk with realloc (mremap for the large
// ones), checked and freed, with malloc_trim now and then (madvise of free
// pages in every arena, brk shrinking in the main one). Each thread follows
// its own seeded sequence, so the output is the same on every run; a block
// whose content is wrong is counted and named.
// Usage: arenas [OPS_PER_THREAD]
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS 512
#ifndef THREADS
#define THREADS 4
#endif
static long ops = 400000;

struct blk { unsigned char *p; size_t len; uint64_t tag; };
struct res { long allocs, reallocs, frees, trims, bad; uint64_t sum; };

static uint64_t next(uint64_t *s) {
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; return *s;
}
static size_t pick_len(uint64_t *s) {
    unsigned shift = 4 + next(s) % 19;  // 16 B .. 4 MiB
    return ((size_t)1 << shift) + next(s) % ((size_t)1 << shift);
}
// A block's bytes: its tag at its last 8 bytes and at every 4 KiB step
// before them (none overlapping the last).
static void fill(struct blk *b) {
    for (size_t o = 0; o + 16 <= b->len; o += 4096) memcpy(b->p + o, &b->tag, 8);
    if (b->len >= 8) memcpy(b->p + b->len - 8, &b->tag, 8);
    else memset(b->p, (int)(b->tag & 0xff), b->len);
}
static int check(const struct blk *b, size_t upto) {
    if (b->len < 8) {
        for (size_t i = 0; i < b->len && i < upto; i++)
            if (b->p[i] != (unsigned char)(b->tag & 0xff)) return 0;
        return 1;
    }
    for (size_t o = 0; o + 16 <= b->len && o + 8 <= upto; o += 4096)
        if (memcmp(b->p + o, &b->tag, 8)) return 0;
    if (upto >= b->len && memcmp(b->p + b->len - 8, &b->tag, 8)) return 0;
    return 1;
}
static void *run(void *arg) {
    struct res *r = arg;
    uint64_t s = 0x9E3779B97F4A7C15ULL ^ r->sum;  // the thread's seed comes in sum
    r->sum = 0;
    struct blk *b = calloc(SLOTS, sizeof *b);
    for (long i = 0; i < ops; i++) {
        struct blk *x = &b[next(&s) % SLOTS];
        if (!x->p) {
            x->len = pick_len(&s); x->tag = next(&s);
            x->p = malloc(x->len);
            if (!x->p) { x->len = 0; continue; }
            fill(x); r->allocs++;
        } else if (next(&s) % 3 == 0) {
            // Grow or shrink: the kept prefix must survive the move.
            size_t nl = pick_len(&s), keep = nl < x->len ? nl : x->len;
            unsigned char *q = realloc(x->p, nl);
            if (!q) continue;
            struct blk old = *x; old.p = q;
            if (!check(&old, keep)) { r->bad++; fprintf(stderr, "bad block after realloc at op %ld\n", i); }
            x->p = q; x->len = nl; x->tag = next(&s); fill(x); r->reallocs++;
        } else {
            if (!check(x, x->len)) { r->bad++; fprintf(stderr, "bad block at op %ld\n", i); }
            r->sum = r->sum * 31 + x->tag % 1000003;
            free(x->p); x->p = NULL; r->frees++;
        }
        if (i % 20000 == 19999) { malloc_trim(0); r->trims++; }
    }
    for (int k = 0; k < SLOTS; k++)
        if (b[k].p) { if (!check(&b[k], b[k].len)) r->bad++; free(b[k].p); }
    free(b);
    return NULL;
}
int main(int argc, char **argv) {
    if (argc > 1) ops = atol(argv[1]);
    pthread_t t[THREADS]; struct res r[THREADS];
    memset(r, 0, sizeof r);
    for (int i = 0; i < THREADS; i++) { r[i].sum = 0x1234567ULL * (i + 1); pthread_create(&t[i], NULL, run, &r[i]); }
    long bad = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        printf("thread %d: allocs %ld reallocs %ld frees %ld trims %ld bad %ld sum %llu\n", i, r[i].allocs,
               r[i].reallocs, r[i].frees, r[i].trims, r[i].bad, (unsigned long long)r[i].sum);
        bad += r[i].bad;
    }
    printf(bad ? "FAILED: %ld bad blocks\n" : "ok\n", bad);
    return bad != 0;
}
