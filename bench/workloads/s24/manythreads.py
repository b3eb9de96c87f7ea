# THREADS threads (default 300), each folding its own series ROUNDS times
# (default 200) with a 50 ms sleep after each round; prints a hash of all
# their results at the end: the same output however it was scheduled.
# BENCHMARKS.md, "Runs of zeros in images".
import hashlib
import sys
import threading
import time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 300
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 200
res = [0] * N


def work(i):
    s = 0
    for k in range(ROUNDS):
        for j in range(2000):
            s = (s * 31 + i + j + k) % 1000000007
        time.sleep(0.05)
    res[i] = s


ts = [threading.Thread(target=work, args=(i,)) for i in range(N)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print(hashlib.sha256(repr(res).encode()).hexdigest())
