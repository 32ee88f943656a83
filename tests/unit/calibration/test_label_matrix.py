"""An annotation matrix is validated once: `validated_labels` returns a `LabelMatrix` that `as_annotation_array`
passes through; arrays computed from it are checked again."""

import numpy as np
import pytest

from noisycal_platform.calibration.channels._base import LabelMatrix, as_annotation_array, validated_labels


def test_validated_matrix_passes_through_and_derived_arrays_are_checked_again():
    a = np.array([[0.0, 1.0], [np.nan, 1.0], [1.0, 0.0]])
    v = validated_labels(a)
    assert isinstance(v, LabelMatrix) and as_annotation_array(v) is v
    np.testing.assert_array_equal(v, a)
    with pytest.raises(ValueError, match="only 0, 1 or NaN"):
        as_annotation_array(v * 2)  # computed from it: not vouched for
    with pytest.raises(ValueError, match="only 0, 1 or NaN"):
        validated_labels(np.array([[0.0, 2.0]]))
