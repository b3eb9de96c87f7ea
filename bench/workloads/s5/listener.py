# Holds a listening TCP socket (nobody connects) while computing; prints rounds.
import socket, sys
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
x, s = 1, 0
for r in range(int(sys.argv[1]) if len(sys.argv) > 1 else 60):
    for i in range(300000):
        x = (x * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
        s = (s + (x >> 60)) % 1000003
    print("round", r, s, flush=True)
