"""Starting a local web server in a test: a free port, and waiting until Dagster's ``/server_info`` answers."""

import socket
import time
import urllib.request

import pytest


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_server_info(port: int, deadline: float, poll_s: float, what: str) -> None:
    """Poll ``/server_info`` on ``port`` until it answers 200; fail the test naming ``what`` after ``deadline``."""
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(poll_s)
    pytest.fail(what)
