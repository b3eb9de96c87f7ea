# numpy with its OpenBLAS threads (a thread pool that spins, then sleeps,
# between calls): ROUNDS rounds of a seeded random matrix, its Gram matrix,
# a solve and an FFT, each round's figures printed rounded, so that the
# output of a moved run can be compared with an unmoved one.
# Usage: python3 npwork.py ROUNDS [N]
import sys
import time
import numpy as np

rounds = int(sys.argv[1])
n = int(sys.argv[2]) if len(sys.argv) > 2 else 300
rng = np.random.default_rng(12345)
acc = np.zeros(n)
t0 = time.monotonic()
for i in range(rounds):
    a = rng.standard_normal((n, n))
    g = a @ a.T + n * np.eye(n)
    x = np.linalg.solve(g, np.ones(n))
    acc += x
    f = np.abs(np.fft.rfft(acc)).sum()
    print(i, f"{x.sum():.6e}", f"{f:.6e}", flush=True)
print("done", f"{acc.sum():.6e}", f"elapsed {time.monotonic() - t0:.1f}", file=sys.stderr)
