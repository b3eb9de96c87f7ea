"""Holds N files open (N given, made in a directory of its own under /tmp)
and sleeps in a loop until killed: a process whose stop is its descriptors'
(bench/many-fds.sh)."""
import os
import sys
import time

n = int(sys.argv[1])
d = f"/tmp/pmig-manyfds.{os.getpid()}"
os.makedirs(d, exist_ok=True)
files = [open(f"{d}/f{i}", "a+") for i in range(n)]
while True:
    time.sleep(0.01)
