# A TCP server on 127.0.0.1:PORT: streams deterministic data slowly (about 8 s) to ONE client, then exits.
import socket, sys, time
port = int(sys.argv[1])
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port)); srv.listen(1); srv.settimeout(20)
c, _ = srv.accept()
for i in range(100):
    c.sendall(("chunk %d %s\n" % (i, "x" * 1000)).encode()); time.sleep(0.08)
c.close()
print("served 100 chunks")
