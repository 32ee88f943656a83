"""Progress events of long steps: in the Dagster run log and in the CLI sinks, with rates and ETA."""

import dagster as dg
import pytest

from assets import progress
from orchestration import cli


def test_epoch_callback_logs_epoch_loss_rate_and_eta_to_the_run_log():
    seen = []
    progress.add_sink(seen.append)

    @dg.asset
    def trains(context: dg.AssetExecutionContext) -> int:
        cb = progress.epoch_progress(context, "ssl_encoder")
        for epoch in (1, 2, 3, 4):  # what train_encoder passes: 50 images, 2 s per epoch
            cb({"epoch": epoch, "epochs": 4, "loss": 1.0 / epoch, "seconds": 2.0 * epoch, "images": 50})
        return 1

    try:
        with dg.instance_for_test() as instance:
            result = dg.materialize([trains], instance=instance)
            messages = [
                e.user_message for e in instance.all_logs(result.run_id) if "progress ssl_encoder" in e.user_message
            ]
    finally:
        progress.remove_sink(seen.append)
    assert len(messages) == 4
    assert messages[0] == "progress ssl_encoder: 1/4 epochs · loss 1.0000 · 25.0 items/s · ETA 6 s"
    assert messages[-1].endswith("ETA 0 s")
    # ETA = remaining epochs x seconds per epoch; items/s = images x epochs done / elapsed
    assert [e["eta_s"] for e in seen] == pytest.approx([6.0, 4.0, 2.0, 0.0], rel=1e-12)
    assert [e["items_per_s"] for e in seen] == pytest.approx([25.0] * 4, rel=1e-12)


def test_timed_reports_start_and_throughput():
    seen = []
    progress.add_sink(seen.append)
    try:
        out = progress.timed(None, "embeddings", 10, lambda: "done")
    finally:
        progress.remove_sink(seen.append)
    assert out == "done"
    assert [(e["done"], e["total"]) for e in seen] == [(0, 10), (10, 10)]
    assert seen[1]["items_per_s"] == pytest.approx(10 / seen[1]["elapsed_s"], rel=1e-12)


def test_cli_draws_a_bar_per_event(capsys):
    cli._progress_bar(
        {
            "label": "ssl_encoder",
            "done": 3,
            "total": 6,
            "unit": "epochs",
            "loss": 0.5,
            "items_per_s": 10.0,
            "eta_s": 30.0,
        }
    )
    err = capsys.readouterr().err
    assert err.startswith("[############------------] ssl_encoder: 3/6 epochs · loss 0.5000")
