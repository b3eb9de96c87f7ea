#!/usr/bin/env python3
"""How many of a process's private pages hold nothing but zeros
(BENCHMARKS.md, "Runs of zeros in images"). Reads /proc/PID/maps, pagemap
and mem (root, or the process's owner with ptrace access); counts present
pages that are not the file's own (anonymous memory, and the pages of a
file mapping the process changed).

Usage: bench/zero-pages.py PID
"""
import struct
import sys

PAGE = 4096
SKIP = {"[vsyscall]", "[vvar]", "[vdso]", "[vvar_vclock]"}


def main(pid):
    zero_page = bytes(PAGE)
    present = zeros = 0
    with open(f"/proc/{pid}/maps") as maps, \
            open(f"/proc/{pid}/pagemap", "rb", buffering=0) as pm, \
            open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for line in maps:
            f = line.split()
            start, end = (int(x, 16) for x in f[0].split("-"))
            path = f[5] if len(f) > 5 else ""
            if path in SKIP or "r" not in f[1]:
                continue
            n = (end - start) // PAGE
            pm.seek(start // PAGE * 8)
            entries = pm.read(n * 8)
            for i in range(len(entries) // 8):
                e = struct.unpack_from("<Q", entries, i * 8)[0]
                if not e >> 63 & 1:
                    continue  # not present
                if e >> 61 & 1 and path:
                    continue  # the file's own page
                try:
                    mem.seek(start + i * PAGE)
                    data = mem.read(PAGE)
                except OSError:
                    continue
                present += 1
                zeros += data == zero_page
    share = 100 * zeros / max(present, 1)
    print(f"pid {pid}: {present} private pages present, {zeros} all zeros ({share:.1f} %)")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(int(sys.argv[1]))
