"""A python3 program for the twentieth sweep (BENCHMARKS.md): sqlite3 on a
file database in the default rollback-journal mode, many small
transactions (each holds POSIX locks on the database file only while it
runs), a query between them. Prints a line every 500 transactions and a
final checksum. Usage: sqlfile.py DIR N"""
import hashlib
import sqlite3
import sys

d, n = sys.argv[1], int(sys.argv[2])
db = sqlite3.connect(f"{d}/t.db", isolation_level=None)
db.execute("CREATE TABLE IF NOT EXISTS kv (k INTEGER PRIMARY KEY, v TEXT)")
h = hashlib.sha256()
for i in range(n):
    db.execute("BEGIN")
    db.execute("INSERT OR REPLACE INTO kv VALUES (?, ?)", (i % 5000, f"value {i * 7919 % 100003}"))
    db.execute("COMMIT")
    row = db.execute("SELECT count(*), sum(length(v)) FROM kv").fetchone()
    h.update(repr(row).encode())
    if i % 500 == 499:
        print(i + 1, row, flush=True)
print(h.hexdigest())
