# Writes its pid to ./pf, reads stdin to the end (slowly, in small reads), prints size and sha256.
import hashlib, os, sys
open("pf", "w").write(str(os.getpid()))
h = hashlib.sha256(); n = 0
while True:
    d = sys.stdin.buffer.read1(4096)
    if not d: break
    h.update(d); n += len(d)
    for _ in range(20): h.digest()
print(n, h.hexdigest())
