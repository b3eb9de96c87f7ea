"""SQLite in WAL mode (which holds a lock on the database from opening to
closing, and maps its -shm file shared), writing transactions for a while;
prints what the database holds at the end. Usage: sqlite_wal.py DIR [ROUNDS]"""
import hashlib, os, sqlite3, sys, time

d = sys.argv[1]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
path = os.path.join(d, "wal.db")
for suffix in ("", "-wal", "-shm"):
    try:
        os.unlink(path + suffix)
    except FileNotFoundError:
        pass
t0 = time.time()
db = sqlite3.connect(path)
db.execute("PRAGMA journal_mode=WAL")
db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
for r in range(rounds):
    with db:
        for i in range(20):
            k = r * 20 + i
            db.execute("INSERT INTO t VALUES (?, ?)", (k, hashlib.sha1(str(k).encode()).hexdigest()))
        if r % 7 == 0:
            db.execute("DELETE FROM t WHERE k % 13 = ?", (r % 13,))
h = hashlib.sha256()
for k, v in db.execute("SELECT k, v FROM t ORDER BY k"):
    h.update(f"{k}:{v}\n".encode())
n = db.execute("SELECT count(*) FROM t").fetchone()[0]
db.close()
print(f"rows {n} sha256 {h.hexdigest()}")
print(f"elapsed {time.time() - t0:.2f}", file=sys.stderr)
