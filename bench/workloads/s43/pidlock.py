"""A daemon's pid-file lock: takes an exclusive POSIX lock on a pid file
(lockf) and an flock on a second file, then hashes for a while, asking the
kernel every 20,000 steps, through descriptors of its own opened apart
(each another open file), whether both locks are still its own. Prints the
hash and how many of those looks found a lock missing (0 unless a move lost
one). Usage: pidlock.py DIR [STEPS]"""
import fcntl, hashlib, os, struct, sys

d = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 3_000_000
pidfile = os.path.join(d, "daemon.pid")
fd = os.open(pidfile, os.O_RDWR | os.O_CREAT, 0o644)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
os.ftruncate(fd, 0)
os.write(fd, f"{os.getpid()}\n".encode())
other = os.open(os.path.join(d, "daemon.lock"), os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
# Opened once and never closed: closing any descriptor of the pid file
# would let go of the process's POSIX lock on it.
probe = os.open(pidfile, os.O_RDWR)
probe2 = os.open(os.path.join(d, "daemon.lock"), os.O_RDWR)
F_OFD_GETLK = 36


def held():
    q = struct.pack("hhqqi4x", fcntl.F_WRLCK, 0, 0, 0, 0)
    t, _, _, _, pid = struct.unpack("hhqqi4x", fcntl.fcntl(probe, F_OFD_GETLK, q))
    mine = t == fcntl.F_WRLCK and pid == os.getpid()
    try:
        fcntl.flock(probe2, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(probe2, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return mine


h = hashlib.sha256()
missing = 0
for i in range(steps):
    h.update(str(i * i).encode())
    if i % 20000 == 0 and not held():
        missing += 1
print(h.hexdigest(), "locks missing at", missing, "looks")
print("elapsed", file=sys.stderr)
