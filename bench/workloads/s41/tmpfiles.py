# A program that works through temporary files, one after another: it
# writes a chunk into a new temporary file, reads it back, deletes it and
# closes it, as sort, compilers and databases do with their spill files.
# Its output (a digest of all it read back) does not depend on its timing.
# Usage: python3 tmpfiles.py ROUNDS
import hashlib, os, sys, tempfile
rounds = int(sys.argv[1])
h = hashlib.sha256()
block = bytes(range(256)) * 256
for i in range(rounds):
    fd, path = tempfile.mkstemp(prefix="s41-")
    os.write(fd, block[: 4096 + (i % 61440)] + str(i).encode())
    os.lseek(fd, 0, os.SEEK_SET)
    h.update(os.read(fd, 1 << 20))
    os.unlink(path)
    os.close(fd)
print(rounds, h.hexdigest())
