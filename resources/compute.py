"""Compute settings handed to the library as plain values (a device string, a thread count)."""

from __future__ import annotations

import dagster as dg

__all__ = ["ComputeResource"]


class ComputeResource(dg.ConfigurableResource):
    """``device``: "auto" (CUDA when present, else CPU), "cpu" or "cuda[:n]"; ``threads``: 0 = torch default."""

    device: str = "auto"
    threads: int = 0

    def torch_device(self) -> str:
        if self.device != "auto":
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    def apply_threads(self) -> None:
        if self.threads > 0:
            import torch

            torch.set_num_threads(self.threads)
