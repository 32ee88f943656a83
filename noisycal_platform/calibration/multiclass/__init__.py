"""Noise-corrected calibration for C classes: confusion-matrix channels, corrected one-hot labels,
top-label and classwise NC-ECE, and corrected recalibration (extending Hanada and Futami 2026 from 2 to C classes).

No dagster imports here.
"""

from ._patterns import as_class_annotations, is_multiclass
from .corrected import (
    as_confusion,
    backward_matrices,
    class_weights,
    corrected_noise_variance,
    corrected_onehot,
    plugin_prevalence,
)
from .dawid_skene import (
    ConfusionFit,
    batched_confusion_em,
    estimate_class_channels,
    estimate_confusion,
    known_confusion,
    validate_confusion,
)
from .inference import calibration_test_multiclass
from .nc_ece import NC_ECE_KINDS, MulticlassNCECEResult, binned_ece_multiclass, check_probs, nc_ece_multiclass
from .recalibration import (
    MULTICLASS_RECALIBRATION_METHODS,
    MulticlassRecalibrator,
    fit_multiclass_recalibrator,
    naive_onehot,
)

__all__ = [
    "MULTICLASS_RECALIBRATION_METHODS",
    "NC_ECE_KINDS",
    "ConfusionFit",
    "MulticlassNCECEResult",
    "MulticlassRecalibrator",
    "as_class_annotations",
    "as_confusion",
    "backward_matrices",
    "batched_confusion_em",
    "binned_ece_multiclass",
    "calibration_test_multiclass",
    "check_probs",
    "class_weights",
    "corrected_noise_variance",
    "corrected_onehot",
    "estimate_class_channels",
    "estimate_confusion",
    "fit_multiclass_recalibrator",
    "is_multiclass",
    "known_confusion",
    "naive_onehot",
    "nc_ece_multiclass",
    "plugin_prevalence",
    "validate_confusion",
]
