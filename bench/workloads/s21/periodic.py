"""A python3 program for the twenty-first sweep (BENCHMARKS.md): a state
file rewritten every 0.1 s under fcntl.lockf, the lock held 50 ms each time
(as a program that checkpoints its state now and then). Prints the state
every 20 updates and a final checksum. Usage: periodic.py DIR N"""
import fcntl
import hashlib
import sys
import time

d, n = sys.argv[1], int(sys.argv[2])
h = hashlib.sha256()
with open(f"{d}/state", "a+") as f:
    for i in range(n):
        fcntl.lockf(f, fcntl.LOCK_EX)
        f.seek(0)
        prev = f.read().strip()
        state = hashlib.sha256((prev + str(i)).encode()).hexdigest()
        f.seek(0)
        f.truncate()
        f.write(state)
        f.flush()
        time.sleep(0.05)
        fcntl.lockf(f, fcntl.LOCK_UN)
        h.update(state.encode())
        if i % 20 == 19:
            print(i + 1, state[:16], flush=True)
        time.sleep(0.05)
print(h.hexdigest())
