"""Starting a local web server in a test: a free port, and waiting until Dagster's ``/server_info`` answers."""

import socket
import time

import pytest

from orchestration.service import webserver_answers


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_server_info(port: int, deadline: float, poll_s: float, what: str) -> None:
    """Poll ``/server_info`` on ``port`` until it answers 200; fail the test naming ``what`` after ``deadline``."""
    if not webserver_answers(port, deadline, poll_s):
        pytest.fail(what)


def wait_for_daemon(instance, seconds: float = 120) -> None:
    """Block until the Dagster daemon of ``instance`` reports a heartbeat; fail after ``seconds``."""
    from orchestration.instance import daemon_running

    deadline = time.time() + seconds
    while not daemon_running(instance) and time.time() < deadline:
        time.sleep(1)
    assert daemon_running(instance), f"no daemon heartbeat within {seconds:.0f} s"
