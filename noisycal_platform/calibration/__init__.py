"""Noise-corrected calibration of a fixed binary predictor from several noisy annotators (Hanada and Futami 2026).

Public API: channels (`Channel`, `ChannelFit`, `estimate_channels`, `NotIdentifiableError`), NC-ECE
(`binned_ece`, `nc_ece`, `NCECEResult`, `aggregation_weights`), the calibration test with debiased NC-ECE and an
interval carrying channel-estimation error (`calibration_test`, `CalibrationTest`), assumption checks
(`assumption_checks`), recalibration (`fit_recalibrator`, `Recalibrator`), sample regimes (`nc_ece_estimated`),
and one function per Dagster asset in `noisycal_platform.calibration.pipeline` (report: `.report`).
No dagster imports here.
"""

from .channels import (
    Channel,
    ChannelFit,
    NotIdentifiableError,
    dawid_skene,
    estimate_channels,
    known_channels,
    score_group_em,
    score_groups,
    two_group,
    two_group_from_moments,
)
from .diagnostics import AssumptionChecks, assumption_checks
from .inference import CalibrationTest, calibration_test
from .nc_ece import NCECEResult, bin_index, binned_ece, corrected_labels, nc_ece, plugin_prevalence
from .recalibration import (
    RECALIBRATION_METHODS,
    Recalibrator,
    UnboundedObjectiveError,
    fit_recalibrator,
    naive_targets,
)
from .sampling import REGIMES, RegimeResult, nc_ece_estimated, regime_partition
from .weights import WEIGHT_RULES, aggregation_weights, corrected_noise_variance

__all__ = [
    "RECALIBRATION_METHODS",
    "REGIMES",
    "WEIGHT_RULES",
    "AssumptionChecks",
    "CalibrationTest",
    "Channel",
    "ChannelFit",
    "NCECEResult",
    "NotIdentifiableError",
    "Recalibrator",
    "RegimeResult",
    "UnboundedObjectiveError",
    "aggregation_weights",
    "assumption_checks",
    "bin_index",
    "binned_ece",
    "calibration_test",
    "corrected_labels",
    "corrected_noise_variance",
    "dawid_skene",
    "estimate_channels",
    "fit_recalibrator",
    "known_channels",
    "naive_targets",
    "nc_ece",
    "nc_ece_estimated",
    "plugin_prevalence",
    "regime_partition",
    "score_group_em",
    "score_groups",
    "two_group",
    "two_group_from_moments",
]
