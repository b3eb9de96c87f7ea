# Writes its pid to ./pf, then produces deterministic lines for ~ROUNDS*0.1 s into stdout
# (a pipe to another process in the pipeline tests).
import os, sys
open("pf", "w").write(str(os.getpid()))
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 80
x = 1
for r in range(rounds):
    lines = []
    for i in range(30000):
        x = (x * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
        if i % 10 == 0: lines.append("%d %d %x" % (r, i, x))
    sys.stdout.write("\n".join(lines) + "\n")
sys.stdout.flush()
