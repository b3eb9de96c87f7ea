# Computes, then prints the process attributes that a launcher (taskset, nice, ionice,
# chrt, prlimit, setarch) sets, so an attribute lost in migration shows in the output.
import ctypes, os, resource, sys
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 12
x, s = 88172645463325252, 0
for r in range(rounds):
    for i in range(300000):
        x ^= (x << 13) & 0xFFFFFFFFFFFFFFFF; x ^= x >> 7; x ^= (x << 17) & 0xFFFFFFFFFFFFFFFF
        s = (s + (x >> 60)) % 1000003
    print("round", r, s, flush=True)
libc = ctypes.CDLL(None, use_errno=True)
print("affinity", sorted(os.sched_getaffinity(0)))
print("nice", os.nice(0))
print("nofile", resource.getrlimit(resource.RLIMIT_NOFILE))
print("core", resource.getrlimit(resource.RLIMIT_CORE), "stack", resource.getrlimit(resource.RLIMIT_STACK))
print("scheduler", os.sched_getscheduler(0), "param", os.sched_getparam(0).sched_priority)
print("ioprio", libc.syscall(252, 1, 0))  # ioprio_get(IOPRIO_WHO_PROCESS, self)
print("personality", open("/proc/self/personality").read().strip())
print("umask", oct(os.umask(0o22)))
print("oom_score_adj", open("/proc/self/oom_score_adj").read().strip())
print("timerslack_ns", open("/proc/self/timerslack_ns").read().strip())
print("comm", open("/proc/self/comm").read().strip())
