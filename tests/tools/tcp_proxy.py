#!/usr/bin/env python3
"""A TCP proxy for tests that need to cut a client off its server.

Usage: tcp_proxy.py LISTEN_PORT_FILE TARGET_HOST TARGET_PORT
Listens on a free 127.0.0.1 port, writes it to LISTEN_PORT_FILE, and forwards
every connection to TARGET (bytes untouched, so TLS passes through).
SIGUSR1: drop every open connection and refuse new ones.
SIGUSR2: accept again. SIGTERM: exit.
"""
import os
import signal
import socket
import sys
import threading

port_file, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
lock = threading.Lock()
conns = set()
refusing = threading.Event()


def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def drop_all(*_):
    refusing.set()
    with lock:
        for s in list(conns):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        conns.clear()


def accept_again(*_):
    refusing.clear()


signal.signal(signal.SIGUSR1, drop_all)
signal.signal(signal.SIGUSR2, accept_again)
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))

listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", 0))
listener.listen(128)
with open(port_file + ".tmp", "w") as f:
    f.write(str(listener.getsockname()[1]))
os.rename(port_file + ".tmp", port_file)

while True:
    try:
        client, _ = listener.accept()
    except InterruptedError:
        continue
    if refusing.is_set():
        client.close()
        continue
    try:
        upstream = socket.create_connection((host, port))
    except OSError:
        client.close()
        continue
    with lock:
        conns.update((client, upstream))
    threading.Thread(target=pump, args=(client, upstream), daemon=True).start()
    threading.Thread(target=pump, args=(upstream, client), daemon=True).start()
