"""Bundled demo inputs, built from data shipped inside installed packages (no download), seeded bit for bit.

- Calibration: scikit-learn's breast-cancer table, a predictor trained on one part and scored on the other,
  three simulated annotators with class-conditional noise (Hanada and Futami 2026 §6), a later model version and batch;
  and a
  ten-class version on scikit-learn's digits with asymmetric confusion matrices and two sites in items.csv, one
  of them miscalibrated on purpose.
- Cleaning: scikit-learn's digits, upscaled, with injected and recorded irrelevant images, near duplicates and
  flipped labels (``datasets/digits_demo/truth.json``); a model's scores for the cleaning-impact analysis;
  simulated expert and lay raters answering the exported confirmation queue in the confirmation tool's format.
- Correctness: a synthetic three-task × three-model set shaped like Rethinking Correctness 2026 (stated as synthetic
in the report).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl

from noisycal_platform.files import atomic_write_bytes, atomic_write_text
from noisycal_platform.paths import HomeLayout

__all__ = [
    "DEMO_DATASET",
    "DEMO_RATERS",
    "write_demo_cleaning_scores",
    "write_demo_confirmations",
    "write_demo_inputs",
    "write_demo_second_arrival",
]

DEMO_DATASET = "digits_demo"
#: (annotator_id, role, sensitivity, specificity): three dermatologist-like experts and two lay raters.
DEMO_RATERS = (
    ("expert_1", "expert", 0.92, 0.98),
    ("expert_2", "expert", 0.88, 0.97),
    ("expert_3", "expert", 0.90, 0.99),
    ("lay_1", "lay", 0.75, 0.90),
    ("lay_2", "lay", 0.70, 0.92),
)


def write_demo_cleaning_scores(home: Path, dataset: str = DEMO_DATASET, version: str = "v1", seed: int = 0) -> Path:
    """``models/<version>/cleaning/<dataset>.csv``: a "digit ≥ 5" classifier's scores for the cleaning-impact
    analysis. Logistic regression on 8×8 grey pixels read back from the PNGs, 2-fold cross-fitted on the dataset
    itself (each image scored by the model that did not see it), trained on the given (possibly flipped) labels;
    ``target`` is the given label ≥ 5."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_predict

    layout = HomeLayout.at(home)
    root = layout.datasets / dataset
    labels = pl.read_csv(root / "labels.csv", schema_overrides={"label": pl.String})
    x = _grey8(root, labels["file_name"].to_list())
    target = np.array([int(s.isdigit() and int(s) >= 5) for s in labels["label"].to_list()])
    folds = StratifiedKFold(n_splits=2, shuffle=True, random_state=seed)
    model = LogisticRegression(max_iter=2000, C=0.5)
    scores = cross_val_predict(model, x, target, cv=folds, method="predict_proba")[:, 1]
    out = pl.DataFrame({"file_name": labels["file_name"], "score": np.round(scores, 6), "target": target})
    path = layout.models / version / "cleaning" / f"{dataset}.csv"
    atomic_write_bytes(path, out.write_csv().encode())
    return path


def _grey8(root: Path, files: list[str]) -> np.ndarray:
    """Each image as 8×8 grey in [0, 1] (box-downsampled): the scikit-learn digits' own resolution."""
    from PIL import Image

    rows = []
    for name in files:
        with Image.open(root / name) as im:
            g = np.asarray(im.convert("L").resize((8, 8), Image.Resampling.BOX), dtype=np.float64) / 255.0
        rows.append(g.reshape(-1))
    return np.stack(rows)


def write_demo_inputs(home: Path, seed: int = 0) -> dict[str, object]:
    """Every first-arrival demo input into ``home`` (calibration, cleaning, correctness)."""
    from noisycal_platform.calibration.demo_data import write_demo_calibration_inputs
    from noisycal_platform.cleaning.demo_data import write_demo_cleaning_dataset
    from noisycal_platform.correctness.demo_data import write_demo_correctness_inputs

    layout = HomeLayout.at(home).ensure()
    written: dict[str, object] = {}
    written["calibration"] = write_demo_calibration_inputs(layout.home, seed=seed)
    written["cleaning_truth"] = write_demo_cleaning_dataset(layout.home, name=DEMO_DATASET, seed=seed)
    written["cleaning_scores"] = write_demo_cleaning_scores(layout.home, DEMO_DATASET, "v1", seed=seed)
    written["correctness"] = write_demo_correctness_inputs(layout.home, seed=seed)
    # the correctness report states that these inputs are synthetic
    atomic_write_text(layout.generations.parent / "SYNTHETIC",
                      "Seeded synthetic demo data (Rethinking Correctness 2026 shape).\n")
    return written


def write_demo_confirmations(home: Path, dataset: str = DEMO_DATASET, seed: int = 0) -> list[Path]:
    """Simulated raters walk the exported confirmation queue with the stopping rule and append their answers
    to ``inbox/confirmations/<annotator>.jsonl``, exactly as the confirmation tool would."""
    from noisycal_platform.cleaning.demo_data import load_demo_truth
    from noisycal_platform.cleaning.simulate import Truth, simulate_answers

    layout = HomeLayout.at(home)
    queue_file = layout.queue_exports / f"{dataset}.parquet"
    if not queue_file.is_file():
        raise FileNotFoundError(
            f"no exported confirmation queue at {queue_file}; materialise cleaning/confirmation_queue first"
        )
    meta = json.loads((layout.queue_exports / f"{dataset}.meta.json").read_text(encoding="utf-8"))
    queue = pl.read_parquet(queue_file)
    truth = Truth.from_demo(load_demo_truth(layout.datasets / dataset))
    records = simulate_answers(queue, truth, DEMO_RATERS, seed=seed, n_stop=int(meta["stopping_count"]))
    by_rater: dict[str, list[str]] = {}
    for rec in records:
        by_rater.setdefault(rec["annotator_id"], []).append(json.dumps(rec, sort_keys=True))
    paths = []
    for rater, lines in sorted(by_rater.items()):
        path = layout.confirmation_inbox / f"{rater}.jsonl"
        atomic_write_text(path, "\n".join(lines) + "\n")
        paths.append(path)
    return paths


def write_demo_second_arrival(home: Path, seed: int = 0) -> dict[str, Path]:
    """What arrives later: model version v2, one more annotation batch (exercises both sensors) and the
    ten-class digits version with its readers' batch and items.csv."""
    from noisycal_platform.calibration.demo_data import (
        write_demo_annotation_batch,
        write_demo_model_version,
        write_demo_multiclass_version,
    )

    layout = HomeLayout.at(home)
    return {
        "model_version": write_demo_model_version(layout.home, version="v2", seed=seed),
        "annotation_batch": write_demo_annotation_batch(layout.home, name="batch_003", seed=seed),
        **{f"multiclass_{k}": p for k, p in write_demo_multiclass_version(layout.home, seed=seed).items()},
    }
