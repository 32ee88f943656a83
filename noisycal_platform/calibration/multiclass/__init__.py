"""Noise-corrected calibration for C classes: confusion-matrix channels, corrected one-hot labels,
top-label and classwise NC-ECE, and corrected recalibration (extending seed 000 from 2 to C classes).

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
from .dawid_skene import ConfusionFit, estimate_confusion, known_confusion, validate_confusion
from .nc_ece import NC_ECE_KINDS, MulticlassNCECEResult, check_probs, nc_ece_multiclass

__all__ = [
    "NC_ECE_KINDS",
    "ConfusionFit",
    "MulticlassNCECEResult",
    "as_class_annotations",
    "as_confusion",
    "backward_matrices",
    "check_probs",
    "class_weights",
    "corrected_noise_variance",
    "corrected_onehot",
    "estimate_confusion",
    "is_multiclass",
    "known_confusion",
    "nc_ece_multiclass",
    "plugin_prevalence",
    "validate_confusion",
]
