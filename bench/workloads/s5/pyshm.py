# POSIX shared memory from python3 in one process (_posixshmem.shm_open, no resource tracker):
# two mmap views of the same object; writes through one, checks through the other.
import _posixshmem, hashlib, mmap, os, sys
name = "/pmig-s5py-%d" % os.getpid()
fd = _posixshmem.shm_open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
size = 32 << 20
os.ftruncate(fd, size)
a = mmap.mmap(fd, size); b = mmap.mmap(fd, size, prot=mmap.PROT_READ)
a[:] = bytes(range(256)) * (size // 256)
x = 1
for r in range(int(sys.argv[1]) if len(sys.argv) > 1 else 40):
    for i in range(100000):
        x = (x * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
        a[x % size] = (a[x % size] + 1) & 255
    print("round", r, hashlib.sha256(a).hexdigest()[:16], hashlib.sha256(b).hexdigest()[:16],
          hashlib.sha256(os.pread(fd, size, 0)).hexdigest()[:16], flush=True)
_posixshmem.shm_unlink(name)
