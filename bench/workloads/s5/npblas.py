# numpy with OpenBLAS's thread pool: matrix products in rounds, integer-valued so the sums are exact.
import sys
import numpy as np
n = 600
a = (np.arange(n * n, dtype=np.float64).reshape(n, n) % 7) - 3
b = (np.arange(n * n, dtype=np.float64).reshape(n, n).T % 5) - 2
for r in range(int(sys.argv[1]) if len(sys.argv) > 1 else 100):
    c = a @ b
    a = ((c + np.arange(n * n, dtype=np.float64).reshape(n, n) * (r + 1)) % 11) - 5
    print("round", r, int(a.sum()), int(np.abs(c).max()), flush=True)
