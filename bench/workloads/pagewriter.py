# Rewrites pages of 32 MiB of private anonymous memory all the time (four
# pages, then a pause of 2 ms), each with content derived from its index and
# how often it was written; on a line "done" on stdin it checks every page
# and prints SAME or DIFFERENT. The same program as the multi-node test
# assisted_post_copy_runs_a_skeleton_and_moves_to_an_older_node_without.

import hashlib, mmap, random, sys, time
P = 4096
N = 8192
m = mmap.mmap(-1, N * P, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
gen = [0] * N
def page(i):
    return hashlib.sha256(b"%d:%d" % (i, gen[i])).digest() * (P // 32)
for i in range(N):
    m[i * P:(i + 1) * P] = page(i)
rng = random.Random(7)
print("READY", flush=True)
while True:
    for _ in range(4):
        i = rng.randrange(N)
        gen[i] += 1
        m[i * P:(i + 1) * P] = page(i)
    line = sys.stdin.readline()
    if not line:
        time.sleep(0.002)
        continue
    if line.split()[0] == "done":
        bad = sum(1 for i in range(N) if m[i * P:(i + 1) * P] != page(i))
        print("SAME" if bad == 0 else "DIFFERENT %d" % bad, flush=True)
        break
