"""What the Python end-to-end tests share: named checks that print as they go and are
collected (a test runs every check, then fails if any did), and a free loopback port.

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
    from checks import check, failures, free_port
"""
import socket

failures = []


def check(cond, what):
    """Prints `ok` or `FAIL` and the check's name; a failure is kept in `failures`."""
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def free_port():
    """A TCP port free on 127.0.0.1 now (the caller binds it soon after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
