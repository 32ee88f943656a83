"""Demo inputs for the calibration pipeline: breast cancer (scikit-learn) + simulated annotators.

Semi-synthetic set-up as in Hanada and Futami 2026 §6.2 / §G.3: a real tabular data set, a predictor trained on one part
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
    "DIGITS_VERSION",
    "digits_confusion",
    "write_demo_annotation_batch",
    "write_demo_calibration_inputs",
    "write_demo_model_version",
    "write_demo_multiclass_version",
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


# ------------------------------------------------------------------------------------------ several classes
#: The multi-class demo version: scikit-learn's digits (10 classes), a logistic regression trained on part of
#: them, three simulated readers whose confusion matrices are not symmetric (each confuses a digit with a
#: particular other one, not the other way round), and items.csv with two sites, the second one's
#: probabilities tempered (softmax(log p / T), T = 2.5): an under-confident model there, on purpose.
DIGITS_VERSION = "digits"
DIGITS_N_TRAIN = 597
DIGITS_TEMPER = 2.5
#: reader: (probability of a wrong answer, digit offset of its usual confusion y -> (y + offset) mod 10)
DIGITS_READERS: dict[str, tuple[float, int]] = {"reader_1": (0.12, 1), "reader_2": (0.18, 3), "reader_3": (0.08, 7)}
DIGITS_SITES = ("north", "south")  # "south" is the miscalibrated subgroup


def digits_confusion(error: float, offset: int, n_classes: int = 10) -> np.ndarray:
    """T[y, a] = P(answer a | digit y): 1 − error on the diagonal, 0.75·error on (y + offset) mod C, the rest
    spread evenly over the other digits (so T[y, y+offset] ≠ T[y+offset, y]: not symmetric)."""
    t = np.full((n_classes, n_classes), 0.25 * error / (n_classes - 2))
    y = np.arange(n_classes)
    t[y, y] = 1.0 - error
    t[y, (y + offset) % n_classes] = 0.75 * error
    return t


def _digits(seed: int) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """(item ids, probabilities (n, 10) as written, true digits, site index) of the scored digits."""
    from scipy.special import softmax
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression

    x, y = load_digits(return_X_y=True)
    perm = np.random.default_rng([seed, 7]).permutation(len(y))
    tr, te = np.sort(perm[:DIGITS_N_TRAIN]), np.sort(perm[DIGITS_N_TRAIN:])
    model = LogisticRegression(C=20.0, max_iter=5000).fit(x[tr] / 16.0, y[tr])
    p = model.predict_proba(x[te] / 16.0)
    site = np.random.default_rng([seed, 8]).integers(0, 2, len(te))
    tempered = softmax(np.log(np.clip(p, 1e-12, 1.0)) / DIGITS_TEMPER, axis=1)
    p = np.where(site[:, None] == 1, tempered, p)
    return [f"dg-{r:04d}" for r in te], p, y[te], site


def write_demo_multiclass_version(home: Path, version: str = DIGITS_VERSION, seed: int = 0) -> dict[str, Path]:
    """models/<version>/predictions.csv (item_id, p_0..p_9), models/<version>/items.csv (item_id, site) and
    inbox/annotations/<version>_001.csv (three readers, every item, labels "0".."9")."""
    home = Path(home)
    ids, p, y, site = _digits(seed)
    pred = pl.DataFrame({"item_id": ids, **{f"p_{c}": p[:, c] for c in range(p.shape[1])}})
    items = pl.DataFrame({"item_id": ids, "site": [DIGITS_SITES[s] for s in site]})
    rng = np.random.default_rng([seed, 9])
    frames = []
    for name, (error, offset) in DIGITS_READERS.items():
        cum = digits_confusion(error, offset).cumsum(axis=1)[y]
        answer = np.minimum((rng.random(len(y))[:, None] > cum).sum(axis=1), 9)
        frames.append(pl.DataFrame({"item_id": ids, "annotator_id": name, "label": answer.astype(str)}))
    folder = home / "models" / version
    return {
        "predictions": _write_csv(pred, folder / "predictions.csv"),
        "items": _write_csv(items, folder / "items.csv"),
        "annotations": _write_csv(pl.concat(frames), home / "inbox" / "annotations" / f"{version}_001.csv"),
    }
