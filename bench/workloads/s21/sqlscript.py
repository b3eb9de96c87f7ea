"""Writes the SQL script of the twenty-first sweep's sqlite3 command-line
case (BENCHMARKS.md) to standard output: N small transactions on a file
database, a query every 500, then a total. Usage: sqlscript.py N"""
import sys

n = int(sys.argv[1])
print("CREATE TABLE IF NOT EXISTS kv (k INTEGER PRIMARY KEY, v TEXT);")
for i in range(n):
    print(f"BEGIN; INSERT OR REPLACE INTO kv VALUES ({i % 5000}, 'value {i * 7919 % 100003}'); COMMIT;")
    if i % 500 == 499:
        print("SELECT count(*), sum(length(v)) FROM kv;")
print("SELECT count(*), sum(length(v)), sum(k) FROM kv;")
