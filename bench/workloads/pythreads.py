# Four threads hashing 1 MiB buffers (sleeping now and then), then the digests in order:
# a multi-threaded real program for bench/real-programs.sh.
import threading, hashlib, time
res = {}
def work(k):
    h = hashlib.sha256()
    buf = bytearray(1 << 20)
    for i in range(2400):
        buf[i % len(buf)] = (i * k) & 255
        h.update(buf)
        if i % 50 == 0:
            time.sleep(0.05)
    res[k] = h.hexdigest()
ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
for k in sorted(res): print(k, res[k])
