/* sysvshm: System V shared memory the process alone has attached.
 *   keyed   a segment with a key, 3 pages and 100 bytes long (the last
 *           page partly the segment's), its middle page made read-only
 *           with mprotect (one attach in three mappings), filled with a
 *           pattern, owner-only permissions (0600);
 *   twice   a private segment of 2 pages attached twice: writable at W,
 *           read-only (SHM_RDONLY) at R, marked for removal;
 *   doomed  a private segment of 1 page, attached and then marked for
 *           removal (IPC_RMID while attached: SHM_DEST);
 *   sparse  a private segment of 64 MiB with two pages written, at 0 and
 *           at 32 MiB, marked for removal.
 * (Marked so that a test that kills it leaves nothing behind; the tests'
 * guards remove keyed segments of this scenario that nothing attaches.)
 * Checked: every segment has its id, size, key, mode and attach count as
 * set up, the key finds the keyed segment, the bytes are the pattern, the
 * middle page of keyed is read-only and the rest writable, a write through
 * W is read through R, R cannot be made writable (a read-only attach),
 * keyed is not marked for removal and the others are, sparse's hole reads
 * zeros.
 * At quit every segment is detached and removed. */
#include "common.h"
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>

#define PG 4096
#define KEYED_LEN (3 * PG + 100)
#define SPARSE (64L << 20)
#define FAR (32L << 20)

static int keyed_id, twice_id, doomed_id, sparse_id;
static key_t keyed_key;
static char *keyed, *w, *r, *doomed, *sp;
static unsigned long nattch[4];

static int ids[4];

static int check_seg(int i, size_t size, unsigned want_mode) {
    struct shmid_ds ds;
    CHECK(shmctl(ids[i], IPC_STAT, &ds) == 0, "IPC_STAT of segment %d: %s", ids[i], strerror(errno));
    CHECK(ds.shm_segsz == size, "segment %d is %zu bytes, want %zu", ids[i], (size_t)ds.shm_segsz, size);
    CHECK((ds.shm_perm.mode & 0777) == want_mode, "segment %d has mode %o", ids[i], ds.shm_perm.mode & 0777);
    CHECK(ds.shm_nattch == nattch[i], "segment %d has %lu attaches, want %lu", ids[i], (unsigned long)ds.shm_nattch,
          nattch[i]);
    CHECK(ds.shm_perm.uid == getuid(), "segment %d is owned by %u", ids[i], ds.shm_perm.uid);
    return 1;
}

static int check(void) {
    char p[5];
    if (!check_seg(0, KEYED_LEN, 0600) || !check_seg(1, 2 * PG, 0640) || !check_seg(2, PG, 0600) ||
        !check_seg(3, SPARSE, 0600))
        return 0;
    int found = shmget(keyed_key, 0, 0);
    CHECK(found == keyed_id, "key %#x finds segment %d, want %d", keyed_key, found, keyed_id);
    long bad = scn_verify(keyed, 3 * PG, 51);
    CHECK(bad < 0, "word %ld of keyed differs", bad);
    bad = scn_verify(keyed + 3 * PG, 96, 52);
    CHECK(bad < 0, "word %ld of keyed's last bytes differs", bad);
    CHECK(scn_map_perms(keyed, p) == 0 && !strcmp(p, "rw-s"), "keyed's first page is %s", p);
    CHECK(scn_map_perms(keyed + PG, p) == 0 && !strcmp(p, "r--s"), "keyed's middle page is %s", p);
    CHECK(scn_map_perms(keyed + 2 * PG, p) == 0 && !strcmp(p, "rw-s"), "keyed's last pages are %s", p);
    keyed[2 * PG] ^= 1;
    keyed[2 * PG] ^= 1;
    bad = scn_verify(w, 2 * PG, 53);
    CHECK(bad < 0, "word %ld of twice differs", bad);
    CHECK(memcmp(w, r, 2 * PG) == 0, "W and R differ");
    char was = w[5000], z = (char)~was;
    w[5000] = z;
    CHECK(r[5000] == z, "a write through W is not read through R");
    w[5000] = was;
    CHECK(scn_map_perms(r, p) == 0 && !strcmp(p, "r--s"), "R is %s", p);
    CHECK(mprotect(r, PG, PROT_READ | PROT_WRITE) < 0 && errno == EACCES,
          "the read-only attach R could be made writable");
    bad = scn_verify(doomed, PG, 54);
    CHECK(bad < 0, "word %ld of doomed differs", bad);
    for (int i = 0; i < 4; i++) {
        struct shmid_ds ds;
        CHECK(shmctl(ids[i], IPC_STAT, &ds) == 0, "IPC_STAT of %d", ids[i]);
        int dest = (ds.shm_perm.mode & SHM_DEST) != 0;
        CHECK(dest == (i != 0), "segment %d is %smarked for removal (mode %o)", ids[i], dest ? "" : "not ",
              ds.shm_perm.mode);
    }
    bad = scn_verify(sp, PG, 55);
    CHECK(bad < 0, "word %ld of sparse's first page differs", bad);
    bad = scn_verify(sp + FAR, PG, 56);
    CHECK(bad < 0, "word %ld of sparse's far page differs", bad);
    long long hole = -1;
    memcpy(&hole, sp + FAR / 2, sizeof hole);
    CHECK(hole == 0, "sparse's hole reads %llx", hole);
    return 1;
}

static void cleanup(void) {
    shmdt(keyed);
    shmdt(w);
    shmdt(r);
    shmdt(doomed);
    shmdt(sp);
    for (int i = 0; i < 4; i++) shmctl(ids[i], IPC_RMID, NULL);
}

static void *attach(int id, int flags) {
    void *p = shmat(id, NULL, flags);
    if (p == (void *)-1) scn_die("shmat %d: %s", id, strerror(errno));
    return p;
}

int main(void) {
    scn_name = "sysvshm";
    /* A key of its own: tests may run side by side. */
    keyed_key = (key_t)(0x504d0000 | (getpid() & 0xffff));
    keyed_id = shmget(keyed_key, KEYED_LEN, IPC_CREAT | IPC_EXCL | 0600);
    twice_id = shmget(IPC_PRIVATE, 2 * PG, IPC_CREAT | 0640);
    doomed_id = shmget(IPC_PRIVATE, PG, IPC_CREAT | 0600);
    sparse_id = shmget(IPC_PRIVATE, SPARSE, IPC_CREAT | 0600);
    if (keyed_id < 0 || twice_id < 0 || doomed_id < 0 || sparse_id < 0) scn_die("shmget: %s", strerror(errno));
    ids[0] = keyed_id;
    ids[1] = twice_id;
    ids[2] = doomed_id;
    ids[3] = sparse_id;
    atexit(cleanup);
    keyed = attach(keyed_id, 0);
    scn_fill(keyed, 3 * PG, 51);
    scn_fill(keyed + 3 * PG, 96, 52);
    if (mprotect(keyed + PG, PG, PROT_READ)) scn_die("mprotect");
    w = attach(twice_id, 0);
    r = attach(twice_id, SHM_RDONLY);
    scn_fill(w, 2 * PG, 53);
    doomed = attach(doomed_id, 0);
    scn_fill(doomed, PG, 54);
    sp = attach(sparse_id, 0);
    scn_fill(sp, PG, 55);
    scn_fill(sp + FAR, PG, 56);
    if (shmctl(twice_id, IPC_RMID, NULL) || shmctl(doomed_id, IPC_RMID, NULL) || shmctl(sparse_id, IPC_RMID, NULL))
        scn_die("IPC_RMID: %s", strerror(errno));
    for (int i = 0; i < 4; i++) {
        struct shmid_ds ds;
        if (shmctl(ids[i], IPC_STAT, &ds)) scn_die("IPC_STAT");
        nattch[i] = ds.shm_nattch;
    }
    scn_run(check, NULL);
}
