#!/usr/bin/env python3
"""A program that keeps a named pipe of its own, as a daemon's command pipe.

It makes a named pipe in /tmp, opens it read-write, leaves a message in
it, then counts for a while (argv[1] steps). At the end it opens the path
again as a writer, as another program would, writes a second message,
reads everything the pipe holds and prints it with its count, and removes
the pipe. After a move the output is the unmigrated run's only if the
first message moved with the pipe, once, and the path reaches the moved
process.
"""
import os
import sys

name = f"/tmp/pmig-fifoprog-{os.getpid()}.fifo"
os.mkfifo(name, 0o600)
fd = os.open(name, os.O_RDWR | os.O_NONBLOCK)
os.write(fd, b"hello through a named pipe")
s = sum(i * i % 7 for i in range(int(sys.argv[1])))
w = os.open(name, os.O_WRONLY | os.O_NONBLOCK)
os.write(w, b"; and after")
print(s, os.read(fd, 100).decode())
os.unlink(name)
