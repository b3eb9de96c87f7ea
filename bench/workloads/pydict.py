# A python3 workload for bench/hops.sh: a dict of N entries (default 1M,
# about 140 MB), then ROUNDS rounds (default 60) of hashing 1000 of its
# entries and sleeping 50 ms (about 3.5 s for 60). Prints a digest of what
# it hashed, the same on every run.
# Usage: python3 pydict.py [N [ROUNDS]]
import hashlib
import sys
import time

n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 60
d = {i: str(i) for i in range(n)}
h = hashlib.sha256()
for r in range(rounds):
    for k in range(r % 997, n, 997):
        h.update(d[k].encode())
    time.sleep(0.05)
print(h.hexdigest()[:16], len(d))
