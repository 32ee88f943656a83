"""Progress of long asset steps (encoder training, embeddings): events in the Dagster run log, a bar in the CLI.

``epoch_progress(context, label)`` is the ``progress=`` callback of ``train_encoder`` (it receives
``{"epoch", "epochs", "loss", "seconds", "images"}`` after each epoch); ``timed(context, label, n, fn)`` reports
one item-counting step. Each event is logged with ``context.log.info`` (the run log the UI shows) as
``progress <label>: <done>/<total> <unit> loss … · … items/s · ETA … s`` and passed to the sinks the CLI
registers (``add_sink``), which draw a progress bar when the step runs inside the ``noisycal`` process.

Rates: items/s = items processed / elapsed seconds; ETA = (total − done) × elapsed / done (constant-rate
extrapolation).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["ProgressEvent", "add_sink", "epoch_progress", "format_event", "remove_sink", "report", "timed"]

ProgressEvent = dict[str, Any]
T = TypeVar("T")

_SINKS: list[Callable[[ProgressEvent], None]] = []


def add_sink(sink: Callable[[ProgressEvent], None]) -> None:
    _SINKS.append(sink)


def remove_sink(sink: Callable[[ProgressEvent], None]) -> None:
    if sink in _SINKS:
        _SINKS.remove(sink)


def format_event(event: ProgressEvent) -> str:
    parts = [f"progress {event['label']}: {event['done']}/{event['total']} {event['unit']}"]
    if event.get("loss") is not None:
        parts.append(f"loss {event['loss']:.4f}")
    if event.get("items_per_s") is not None:
        parts.append(f"{event['items_per_s']:.1f} items/s")
    if event.get("eta_s") is not None:
        parts.append(f"ETA {event['eta_s']:.0f} s")
    return " · ".join(parts)


def report(context: Any, event: ProgressEvent) -> None:
    """Log ``event`` to the run log of ``context`` (any Dagster execution context) and to the CLI sinks."""
    if context is not None:
        context.log.info(format_event(event))
    for sink in list(_SINKS):
        sink(event)


def _event(label: str, done: int, total: int, unit: str, elapsed: float, items: float | None, **extra) -> dict:
    return {
        "label": label,
        "done": done,
        "total": total,
        "unit": unit,
        "elapsed_s": elapsed,
        "items_per_s": items / elapsed if items is not None and elapsed > 0 else None,
        "eta_s": (total - done) * elapsed / done if done > 0 else None,
        **extra,
    }


def epoch_progress(context: Any, label: str) -> Callable[[dict], None]:
    """The ``progress=`` callback for ``train_encoder``: one event per epoch (epoch, loss, images/s, ETA)."""

    def _callback(info: dict) -> None:
        epoch, epochs, seconds = int(info["epoch"]), int(info["epochs"]), float(info["seconds"])
        images = info.get("images")
        items = float(images) * epoch if images is not None else None
        report(context, _event(label, epoch, epochs, "epochs", seconds, items, loss=float(info["loss"])))

    return _callback


def timed(context: Any, label: str, n_items: int, fn: Callable[[], T]) -> T:
    """Run ``fn`` (which processes ``n_items`` items) and report its start and its throughput."""
    report(context, _event(label, 0, n_items, "items", 0.0, None))
    t0 = time.perf_counter()
    out = fn()
    report(context, _event(label, n_items, n_items, "items", time.perf_counter() - t0, float(n_items)))
    return out
