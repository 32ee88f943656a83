"""Interrupt signals that a backgrounded start left ignored, restored before Dagster or Dask start processes."""

from __future__ import annotations

import signal

__all__ = ["heed_interrupts"]


def heed_interrupts() -> None:
    """Give SIGINT and SIGTERM back their defaults in this process where they are ignored (main thread only).

    A shell that backgrounds a command (``cmd &``, ``nohup``, some CI runners) starts it with SIGINT ignored;
    Dagster's interrupt setup then maps SIGTERM to the same disposition, and an ignored signal survives
    ``exec``, so every process started afterwards inherits both: Dask workers, and in them the ``tail -F``
    followers of Dagster's compute logs, which Dagster stops with SIGTERM and then waits 30 s for, twice per
    step (about a minute lost per step of a Dask run, which looks like a hang). Handlers a program installed
    itself are left alone; only ``SIG_IGN`` is replaced.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
