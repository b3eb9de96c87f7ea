# A program that opens, writes, reads and closes files all the time, as a
# log writer or a build step does: 50 files rewritten in turn in the
# directory DIR, each read back, and one log kept open for appending.
# Prints a digest of all it read and the log's size: the same with or
# without migration. Usage: python3 filer.py DIR ITERATIONS
import hashlib
import os
import sys

d, n = sys.argv[1], int(sys.argv[2])
log = open(os.path.join(d, "log.txt"), "a")
h = hashlib.sha256()
for i in range(n):
    p = os.path.join(d, "f%d.txt" % (i % 50))
    with open(p, "w") as f:
        f.write(("%d " % i) * (i % 300 + 1))
    with open(p) as f:
        h.update(f.read().encode())
    log.write("%d\n" % i)
    if i % 100 == 0:
        log.flush()
    h.update(str(sum(j * j for j in range(2000))).encode())
log.close()
print(h.hexdigest(), os.path.getsize(os.path.join(d, "log.txt")))
