# Imports C extension modules one at a time between bits of work, so that a
# migration often stops it inside dlopen (the dynamic loader's lock held),
# and prints a digest that depends on every step (bench/early-cases.txt).
import hashlib
import importlib

MODULES = [
    "_decimal", "_json", "_csv", "array", "cmath", "_bisect", "_heapq",
    "_struct", "_pickle", "_datetime", "_random", "_statistics", "unicodedata",
    "_sha3", "_blake2", "_md5", "_lzma", "_bz2", "zlib", "binascii",
    "_elementtree", "pyexpat", "_sqlite3", "_ctypes", "_queue", "_zoneinfo",
    "_multibytecodec", "_codecs_jp", "_codecs_kr", "_codecs_cn", "_codecs_tw",
    "_codecs_hk", "_codecs_iso2022", "mmap", "select", "_socket", "fcntl",
    "resource", "termios", "grp", "_uuid", "_contextvars", "_asyncio",
]

h = hashlib.sha256()
for i, name in enumerate(MODULES):
    try:
        m = importlib.import_module(name)
        h.update(name.encode() + b":" + str(sorted(n for n in dir(m) if not n.startswith("__"))[:5]).encode())
    except ImportError:
        h.update(name.encode() + b": missing")
    for j in range(200000):
        h.update(str(i * 100003 + j).encode())
print(len(MODULES), "modules", h.hexdigest())
