"""Demo inputs for the calibration pipeline: breast cancer (scikit-learn) + simulated annotators.

Semi-synthetic set-up as in seed 000 §6.2 / §G.3: a real tabular data set, a predictor trained on one part
and scored on the other, and annotators simulated with class-conditional noise
P(A_j = 1 | Y = 0) = a_j, P(A_j = 0 | Y = 1) = b_j, independent given Y.

- Data: `sklearn.datasets.load_breast_cancer` (569 tumours, offline). Y = 1 means malignant
  (sklearn's target 0), item_id = "bc-<row:04d>".
- Split (``np.random.default_rng(seed)``): 228 items train the predictors, the other 341 are scored and
  annotated.
- Model "v1": logistic regression with strong L2 (C = 0.01) on standardised features — accurate but
  under-confident, i.e. deliberately miscalibrated. Model "v2" (arrives later): logistic regression with
  C = 1.0 (a different, better-calibrated model).
- Annotators: `DEMO_CHANNELS` below. Each (item, annotator) pair is labelled; about 12 % of the pairs are
  held back and arrive later as one extra batch (`write_demo_annotation_batch`).

Everything is deterministic bit for bit for a given seed (files are written atomically: temp + rename).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl

__all__ = [
    "DEMO_CHANNELS",
    "write_demo_annotation_batch",
    "write_demo_calibration_inputs",
    "write_demo_model_version",
]

DEMO_CHANNELS: dict[str, tuple[float, float]] = {  # annotator_id: (fpr a_j, fnr b_j)
    "rater_1": (0.10, 0.20),
    "rater_2": (0.05, 0.10),
    "rater_3": (0.20, 0.08),
}
N_TRAIN = 228
HOLD_BACK = 0.12
_T0 = datetime(2026, 1, 5, 9, 0, 0, tzinfo=UTC)
_MODELS = {"v1": 0.01, "v2": 1.0}  # version → inverse L2 strength C of the logistic regression


def _data(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_breast_cancer

    x, target = load_breast_cancer(return_X_y=True)
    y = (target == 0).astype(np.int8)  # 1 = malignant
    perm = np.random.default_rng(seed).permutation(len(y))
    return x, y, np.sort(perm[:N_TRAIN]), np.sort(perm[N_TRAIN:])


def _ids(rows: np.ndarray) -> list[str]:
    return [f"bc-{r:04d}" for r in rows]


def _scores(version: str, seed: int) -> tuple[list[str], np.ndarray]:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if version not in _MODELS:
        raise ValueError(f"version must be one of {sorted(_MODELS)}, got {version!r}")
    x, y, tr, te = _data(seed)
    model = make_pipeline(StandardScaler(), LogisticRegression(C=_MODELS[version], max_iter=5000))
    model.fit(x[tr], y[tr])
    return _ids(te), model.predict_proba(x[te])[:, 1].astype(np.float64)


def _annotations(seed: int) -> tuple[pl.DataFrame, np.ndarray]:
    """All simulated labels (long) and a held-back mask (rows that arrive in the later batch)."""
    _, y, _, te = _data(seed)
    yt = y[te]
    rng = np.random.default_rng([seed, 1])
    names = list(DEMO_CHANNELS)
    fpr = np.array([DEMO_CHANNELS[a][0] for a in names])
    fnr = np.array([DEMO_CHANNELS[a][1] for a in names])
    u = rng.random((len(te), len(names)))
    labels = np.where(yt[:, None] == 1, u >= fnr, u < fpr).astype(np.int8)
    held = rng.random((len(te), len(names))) < HOLD_BACK
    minutes = np.arange(labels.size).reshape(labels.shape)
    stamps = [(_T0 + timedelta(minutes=int(m))).strftime("%Y-%m-%dT%H:%M:%SZ") for m in minutes.ravel()]
    df = pl.DataFrame(
        {
            "item_id": np.repeat(np.array(_ids(te), dtype=object), len(names)).tolist(),
            "annotator_id": names * len(te),
            "label": labels.ravel(),
            "timestamp": stamps,
        },
        schema={"item_id": pl.Utf8, "annotator_id": pl.Utf8, "label": pl.Int8, "timestamp": pl.Utf8},
    )
    return df, held.ravel()


def _write_csv(df: pl.DataFrame, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    df.write_csv(tmp)
    os.replace(tmp, path)
    return path


def write_demo_calibration_inputs(home: Path, seed: int = 0) -> dict[str, list[Path]]:
    """Write the initial demo inputs under ``home`` ($NOISYCAL_HOME).

    inbox/annotations/batch_001.csv, batch_002.csv (item_id, annotator_id, label, timestamp; the first and
    second half of the items, held-back pairs excluded), models/v1/predictions.csv (item_id, score),
    references/labels.csv (item_id, label). Returns {"annotations": [...], "predictions": [...],
    "references": [...]} paths.
    """
    home = Path(home)
    ann, held = _annotations(seed)
    first = ann.filter(pl.Series(~held))
    items = sorted(first["item_id"].unique().to_list())
    cut = items[len(items) // 2]
    p1 = _write_csv(first.filter(pl.col("item_id") < cut), home / "inbox" / "annotations" / "batch_001.csv")
    p2 = _write_csv(first.filter(pl.col("item_id") >= cut), home / "inbox" / "annotations" / "batch_002.csv")
    pred = write_demo_model_version(home, "v1", seed)
    _, y, _, te = _data(seed)
    ref = _write_csv(
        pl.DataFrame({"item_id": _ids(te), "label": y[te]}, schema={"item_id": pl.Utf8, "label": pl.Int8}),
        home / "references" / "labels.csv",
    )
    return {"annotations": [p1, p2], "predictions": [pred], "references": [ref]}


def write_demo_model_version(home: Path, version: str = "v2", seed: int = 0) -> Path:
    """Write models/<version>/predictions.csv (item_id, score) for "v1" or "v2"; same items as v1."""
    ids, s = _scores(version, seed)
    return _write_csv(
        pl.DataFrame({"item_id": ids, "score": s}, schema={"item_id": pl.Utf8, "score": pl.Float64}),
        Path(home) / "models" / version / "predictions.csv",
    )


def write_demo_annotation_batch(home: Path, name: str = "batch_003", seed: int = 0) -> Path:
    """Write inbox/annotations/<name>.csv with the held-back (item, annotator) labels (use the same seed)."""
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"name must be a plain file stem, got {name!r}")
    ann, held = _annotations(seed)
    return _write_csv(ann.filter(pl.Series(held)), Path(home) / "inbox" / "annotations" / f"{name}.csv")
