"""Watches a directory of its own with inotify (through ctypes), creates and
removes 2000 files in it one at a time and reads each file's IN_CREATE and
IN_DELETE before the next; prints every event count and a digest of the
names seen (bench/sweep4-cases.txt)."""
import ctypes, hashlib, os, struct, tempfile, time

libc = ctypes.CDLL(None, use_errno=True)
IN_CREATE, IN_DELETE = 0x100, 0x200
d = tempfile.mkdtemp(prefix="inoloop.", dir=".")
fd = libc.inotify_init1(0)
assert fd >= 0
wd = libc.inotify_add_watch(fd, d.encode(), IN_CREATE | IN_DELETE)
assert wd == 1, wd
h = hashlib.sha256()
counts = {IN_CREATE: 0, IN_DELETE: 0}

def expect(mask, name):
    buf = os.read(fd, 4096)
    w, m, _, ln = struct.unpack_from("iIII", buf)
    got = buf[16:16 + ln].rstrip(b"\0").decode()
    assert (w, m & mask, got) == (wd, mask, name), (w, m, got, name)
    assert len(buf) == 16 + ln, "more than one event"
    counts[mask] += 1
    h.update(got.encode())

for i in range(2000):
    name = f"f{i}"
    open(os.path.join(d, name), "w").close()
    expect(IN_CREATE, name)
    os.unlink(os.path.join(d, name))
    expect(IN_DELETE, name)
    time.sleep(0.002)
os.rmdir(d)
print("created", counts[IN_CREATE], "deleted", counts[IN_DELETE], h.hexdigest()[:16])
