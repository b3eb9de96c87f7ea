import sys, time
n = 0
for l in sys.stdin:
    time.sleep(0.0008)
    n += int(l)
    print(l.strip(), n)
print("total", n)
