# A python3 workload for bench/hops.sh: a 1M-entry dict (about 140 MB),
# then 60 rounds of hashing 1000 of its entries and sleeping 50 ms (about
# 3.5 s in all). Prints a digest of what it hashed, the same on every run.
import hashlib
import time

d = {i: str(i) for i in range(1_000_000)}
h = hashlib.sha256()
for r in range(60):
    for k in range(r, 1_000_000, 997):
        h.update(d[k].encode())
    time.sleep(0.05)
print(h.hexdigest()[:16], len(d))
