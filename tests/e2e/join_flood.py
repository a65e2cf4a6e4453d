"""join_flood.py HOST PORT NSRC SECONDS — a connection flood against a gossip
port, as issue 27 describes it: NSRC source addresses (127.0.0.2, .3, …;
every 127/8 address is local on Linux) together keep about 200 connections
open without sending a byte, and reopen each one the moment the seed closes
it, as fast as they can, for SECONDS.  Prints "connects N per_s R" at the
end.  Used by tests/e2e/test_join_flood.sh."""
import selectors
import socket
import sys
import threading
import time

host, port, nsrc, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
stop = time.monotonic() + secs
counts = [0] * nsrc


def flood(i):
    src = "127.0.0.%d" % (2 + i)
    sel = selectors.DefaultSelector()

    def connect():
        s = socket.socket()
        s.setblocking(False)
        try:
            s.bind((src, 0))
            s.connect((host, port))
        except BlockingIOError:
            pass
        except OSError:
            s.close()
            return
        sel.register(s, selectors.EVENT_READ)
        counts[i] += 1

    for _ in range(200 // nsrc + 1):
        connect()
    while time.monotonic() < stop:
        for key, _ in sel.select(0.05):
            s = key.fileobj
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            if not data:  # closed by the seed: open another at once
                sel.unregister(s)
                s.close()
                connect()


threads = [threading.Thread(target=flood, args=(i,)) for i in range(nsrc)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("connects %d per_s %.0f" % (sum(counts), sum(counts) / secs), flush=True)
