#!/usr/bin/env python3
"""A program that sandboxes itself with libseccomp, as a service does.

It loads a seccomp filter through libseccomp (ctypes): socket(2) and
ptrace(2) fail with EACCES, everything else is allowed. Then four threads
count primes in slices of [0, N) for about ROUNDS rounds, each round
checking that the sandbox still holds in that thread. It prints the count
and "sandbox=held" (or what broke) at the end: the output of a run moved
between nodes must equal an unmoved run's.

With "late" as a third argument, two helper threads start before the
sandbox, which libseccomp then loads in the main thread alone (it does not
synchronise threads by default): the helpers stay unfiltered, and say so
at the end ("helpers=unfiltered"), while the workers, made after it, are
filtered.

Usage: pysandbox.py [N [ROUNDS [late]]]   (default 200000 40)
"""
import ctypes
import ctypes.util
import errno
import socket
import sys
import threading

SCMP_ACT_ALLOW = 0x7FFF0000


def scmp_act_errno(e):
    return 0x00050000 | (e & 0xFFFF)


def sandbox():
    lib = ctypes.CDLL(ctypes.util.find_library("seccomp") or "libseccomp.so.2", use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_rule_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
    if not ctx:
        sys.exit("seccomp_init failed")
    for name in (b"socket", b"ptrace"):
        nr = lib.seccomp_syscall_resolve_name(name)
        if lib.seccomp_rule_add(ctx, scmp_act_errno(errno.EACCES), nr, 0) != 0:
            sys.exit("seccomp_rule_add %s failed" % name.decode())
    # seccomp_load sets no_new_privs itself (SCMP_FLTATR_CTL_NNP, on by default).
    if lib.seccomp_load(ctx) != 0:
        sys.exit("seccomp_load failed")
    lib.seccomp_release(ctx)


def sandbox_holds():
    try:
        socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
        return False
    except PermissionError:
        return True


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    late = len(sys.argv) > 3 and sys.argv[3] == "late"
    go = threading.Event()
    helpers_saw = []

    def helper():
        go.wait()
        helpers_saw.append(sandbox_holds())

    helpers = [threading.Thread(target=helper) for _ in range(2 if late else 0)]
    for h in helpers:
        h.start()
    sandbox()
    counts = [0] * 4
    broken = []

    def work(k):
        for r in range(rounds):
            lo, hi = k * n // 4, (k + 1) * n // 4
            c = 0
            for x in range(max(lo, 2), hi):
                d = 2
                while d * d <= x:
                    if x % d == 0:
                        break
                    d += 1
                else:
                    c += 1
            counts[k] += c
            if not sandbox_holds():
                broken.append("thread %d round %d" % (k, r))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    last = threading.Thread(target=lambda: broken.extend([] if sandbox_holds() else ["a thread made at the end"]))
    last.start()
    last.join()
    go.set()
    for h in helpers:
        h.join()
    extra = ""
    if late:
        extra = " helpers=" + ("unfiltered" if helpers_saw == [False, False] else "filtered: %s" % helpers_saw)
    print("primes=%d sandbox=%s%s" % (sum(counts), "held" if not broken and sandbox_holds() else "BROKEN: " + ", ".join(broken[:5]), extra))


if __name__ == "__main__":
    main()
