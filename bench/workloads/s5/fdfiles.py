# Kinds of open files: a directory fd (listing read after), an O_APPEND file, /proc/self/status
# (re-read after: which process does it describe?), /dev/urandom, a file renamed while open,
# a read-only file at an offset. Computes, then checks each.
import os, sys
os.makedirs("ffdir", exist_ok=True)
for n in ("a", "b", "c"): open("ffdir/" + n, "w").write(n)
dfd = os.open("ffdir", os.O_RDONLY | os.O_DIRECTORY)
afd = os.open("append.txt", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)
os.write(afd, b"first\n")
noproc = len(sys.argv) > 2 and sys.argv[2] == "noproc"
pfd = None if noproc else os.open("/proc/self/status", os.O_RDONLY)
me = os.getpid()
ufd = os.open("/dev/urandom", os.O_RDONLY)
open("before-rename.txt", "w").write("renamed file content\n")
rfd = os.open("before-rename.txt", os.O_RDONLY)
os.rename("before-rename.txt", "after-rename.txt")
open("offset.txt", "w").write("".join("%05d\n" % i for i in range(2000)))
ofd = os.open("offset.txt", os.O_RDONLY); os.lseek(ofd, 600, 0)
x, s = 1, 0
for r in range(int(sys.argv[1]) if len(sys.argv) > 1 else 60):
    for i in range(300000):
        x = (x * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
        s = (s + (x >> 60)) % 1000003
    os.write(afd, b"round %d\n" % r)
    print("round", r, s, flush=True)
print("dir listing", sorted(os.listdir(dfd)))
open("append.txt", "a").write("middle\n")  # another writer: O_APPEND must write after it
os.write(afd, b"last\n")
lines = open("append.txt").read().split("\n")
print("append lines", len(lines), lines[0], lines[-3], lines[-2])
if pfd is not None:
    st = os.pread(pfd, 4096, 0).decode()
    pid_line = [l for l in st.split("\n") if l.startswith("Pid:")][0].split()[1]
    print("proc/self/status fd describes me:", int(pid_line) == os.getpid(), "name", st.split("\n")[0])
print("urandom read", len(os.read(ufd, 16)))
print("renamed fd reads", os.read(rfd, 100))
print("offset fd reads", os.read(ofd, 12))
