"""An event loop on a timerfd (through ctypes): a 5 ms interval timer read
until 1200 expirations have been counted, with some work between reads.
Prints a fixed line and the work's result, so that its output does not
depend on timing (bench/sweep4-cases.txt)."""
import ctypes, os, struct

libc = ctypes.CDLL(None, use_errno=True)

class Timespec(ctypes.Structure):
    _fields_ = [("s", ctypes.c_long), ("ns", ctypes.c_long)]

class Itimerspec(ctypes.Structure):
    _fields_ = [("interval", Timespec), ("value", Timespec)]

fd = libc.timerfd_create(1, 0)  # CLOCK_MONOTONIC, blocking
assert fd >= 0, ctypes.get_errno()
t = Itimerspec(Timespec(0, 5_000_000), Timespec(0, 5_000_000))
assert libc.timerfd_settime(fd, 0, ctypes.byref(t), None) == 0
ticks, acc = 0, 0
while ticks < 1200:
    n = struct.unpack("Q", os.read(fd, 8))[0]
    assert n >= 1, n
    ticks += n
    for i in range(2000):
        acc = (acc * 31 + i) % 1000003
print("timerfd: at least 1200 expirations read")
print("work done")
