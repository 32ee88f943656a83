"""Errors of the orchestration layer that the CLI reports as a message (kept free of heavy imports)."""

__all__ = ["HomeBusy"]


class HomeBusy(RuntimeError):
    """Another noisycal runner (or run) held the home for longer than the wait allowed."""
