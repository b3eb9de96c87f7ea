# Writes its pid to ./pf, connects to 127.0.0.1:PORT, reads everything, prints a digest.
import hashlib, os, socket, sys, time
open("pf", "w").write(str(os.getpid()))
port = int(sys.argv[1])
for _ in range(50):
    try:
        s = socket.create_connection(("127.0.0.1", port)); break
    except OSError: time.sleep(0.1)
h = hashlib.sha256(); n = 0
while True:
    d = s.recv(65536)
    if not d: break
    h.update(d); n += len(d)
print(n, h.hexdigest())
