"""Keeps its working data in a memfd mapped twice, shared (two views of
the same pages), and checks through the descriptor that the views and the
file agree; prints a digest every 50 rounds. Usage: memfdloop.py ROUNDS."""
import hashlib
import mmap
import os
import sys
import time

SIZE = 8 << 20
rounds = int(sys.argv[1])
fd = os.memfd_create("memfdloop", os.MFD_ALLOW_SEALING)
os.ftruncate(fd, SIZE)
fcntl_seals = 0
try:
    import fcntl
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    fcntl_seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
except (ImportError, AttributeError):
    pass
a = mmap.mmap(fd, SIZE)
b = mmap.mmap(fd, SIZE, prot=mmap.PROT_READ)
h = hashlib.sha256()
for r in range(rounds):
    off = (r * 40961) % (SIZE - 4096)
    a[off:off + 4096] = hashlib.sha256(str(r).encode()).digest() * 128
    if b[off:off + 4096] != a[off:off + 4096]:
        sys.exit(f"round {r}: the views differ")
    if os.pread(fd, 32, off) != a[off:off + 32]:
        sys.exit(f"round {r}: the file and the view differ")
    h.update(b[off:off + 64])
    if r % 50 == 0:
        print(r, h.hexdigest()[:16], hashlib.sha256(b[:]).hexdigest()[:16], fcntl_seals, flush=True)
        time.sleep(0.02)
print("done", h.hexdigest(), flush=True)
