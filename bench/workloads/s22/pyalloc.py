# python3 keeping the last 20 of a list of bytearrays of 40 to 120 KB, one
# appended every 50 ms (the heap grows and shrinks as it runs); prints the
# list's size each round. Usage: python3 pyalloc.py
import time
l = []
for i in range(500):
    l.append(bytearray(b"%d" % i) * 40000)
    l = l[-20:]
    print(i, sum(len(x) for x in l), flush=True)
    time.sleep(0.05)
