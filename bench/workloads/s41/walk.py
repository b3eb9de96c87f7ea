# Hashes every regular file under a directory, in sorted order, one open
# file at a time: a program that opens and closes thousands of files (and
# directories) while it runs. Prints the count and one digest.
# Usage: python3 walk.py DIR [ROUNDS]
import hashlib, os, sys
top = sys.argv[1]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 1
h = hashlib.sha256()
n = 0
for _ in range(rounds):
    for root, dirs, files in os.walk(top):
        dirs.sort()
        for f in sorted(files):
            p = os.path.join(root, f)
            try:
                if not os.path.isfile(p) or os.path.islink(p):
                    continue
                with open(p, "rb") as fh:
                    while True:
                        b = fh.read(1 << 16)
                        if not b:
                            break
                        h.update(b)
                n += 1
            except OSError:
                continue
print(n, h.hexdigest())
