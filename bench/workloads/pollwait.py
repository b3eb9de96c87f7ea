"""A thread writes a record to a pipe every 20 ms; the main thread waits for
each in poll() with no timeout (the kernel restarts that call through its
restart block after a stop) and sums them (bench/sweep4-cases.txt)."""
import os, select, threading, time

r, w = os.pipe()

def writer():
    for i in range(300):
        os.write(w, f"{i:08d}".encode())
        time.sleep(0.02)
    os.close(w)

threading.Thread(target=writer).start()
p = select.poll()
p.register(r, select.POLLIN)
total, n = 0, 0
while True:
    p.poll()  # no timeout
    b = os.read(r, 8)
    if not b:
        break
    total += int(b)
    n += 1
print("records", n, "sum", total)
