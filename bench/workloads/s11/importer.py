# A program that loads shared libraries while it runs, as one that imports
# lazily or loads plugins does: every C extension module of this python3
# (lib-dynload), one at a time and in name order, with a stretch of work
# before each; and a data file mapped, read and unmapped on every step.
# Prints which modules loaded and a digest of the work: the same with or
# without migration. Usage: python3 importer.py FILE STEPS_PER_MODULE
import glob
import hashlib
import importlib
import mmap
import os
import sys
import sysconfig

path, steps = sys.argv[1], int(sys.argv[2])
dynload = sysconfig.get_config_var("DESTSHARED")
names = sorted(
    os.path.basename(p).split(".")[0] for p in glob.glob(os.path.join(dynload, "*.so"))
)
h = hashlib.sha256()
loaded = []
for name in names:
    for i in range(steps):
        with open(path, "rb") as f:
            m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            h.update(m[(i * 4096) % len(m):][:4096])
            m.close()
        h.update(str(sum(j * j for j in range(3000))).encode())
    try:
        importlib.import_module(name)
        loaded.append(name)
    except Exception as e:  # a module this machine cannot load (no display, ...)
        loaded.append("!" + name + ":" + type(e).__name__)
print(" ".join(loaded))
print(h.hexdigest())
