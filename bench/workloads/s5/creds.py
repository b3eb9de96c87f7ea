# Computes, then prints credentials and security state from /proc/self/status, so that a
# launcher's setting (setpriv: uid/gid, groups, capabilities, no_new_privs) lost in migration shows.
import os, sys
x, s = 1, 0
for r in range(int(sys.argv[1]) if len(sys.argv) > 1 else 60):
    for i in range(300000):
        x = (x * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
        s = (s + (x >> 60)) % 1000003
    print("round", r, s, flush=True)
keys = ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp", "Cpus_allowed_list", "THP_enabled", "untag_mask", "Speculation_Store_Bypass", "SpeculationIndirectBranch")
for line in open("/proc/self/status"):
    if line.split(":")[0] in keys:
        print(line.rstrip())
print("cwd", os.getcwd().rsplit("/", 1)[-1], "pgrp==pid", os.getpgrp() == os.getpid(), "sid==pid", os.getsid(0) == os.getpid())
