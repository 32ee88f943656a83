"""Frame-in, frame-out helpers the Dagster assets call (one per asset; no dagster import).

Input frames (validated upstream by ``noisycal_platform.io``):
- annotations (long): item_id str, annotator_id str, label int (0/1), [timestamp], [source_file]
- predictions: item_id str, score float64 in [0, 1], [model_version]
- references (optional): item_id str, label int (0/1)

Flow: `annotation_matrix` → `channel_estimates_table` (→ `channels_from_table`) → `nc_ece_bins_table`,
`nc_ece_report_table` → `recalibrators_table` → `recalibration_report_table` →
`report.render_calibration_report`.

The channel table's ``weight`` column holds the exact per-annotator weights every downstream NC-ECE uses,
so the SQL model reproduces `nc_ece_bins_table` with (seed 000 §3):
    Ỹ_i = Σ_{j∈J_i} weight_j·(label_ij − fpr_j)/gap_j / Σ_{j∈J_i} weight_j,  J_i = annotators of item i,
    bin_i = least(floor(score_i·B), B − 1), per bin: n, avg(score), avg(Ỹ), avg(Ỹ) − avg(score);
items without annotation (or Σ weight = 0) are excluded; only non-empty bins appear.
"""

from __future__ import annotations

from .recalibration_tables import (
    holdout_mask,
    recalibration_report_table,
    recalibrator_exports,
    recalibrators_from_table,
    recalibrators_table,
)
from .tables import (
    AnnotationMatrix,
    ChannelTable,
    annotation_matrix,
    channel_estimates_table,
    channels_from_table,
    nc_ece_bins_table,
    nc_ece_report_table,
)

__all__ = [
    "AnnotationMatrix",
    "ChannelTable",
    "annotation_matrix",
    "channel_estimates_table",
    "channels_from_table",
    "holdout_mask",
    "nc_ece_bins_table",
    "nc_ece_report_table",
    "recalibration_report_table",
    "recalibrator_exports",
    "recalibrators_from_table",
    "recalibrators_table",
]
