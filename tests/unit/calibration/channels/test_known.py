"""Channel validation and the known-channel wrapper."""

from __future__ import annotations

import pytest

from noisycal_platform.calibration import Channel, known_channels
from noisycal_platform.calibration.channels import as_channels


def test_gap_and_validation():
    assert Channel(0.1, 0.25).gap == pytest.approx(0.65)
    with pytest.raises(ValueError, match="fpr"):
        Channel(-0.1, 0.2)
    with pytest.raises(ValueError, match="fnr"):
        Channel(0.1, 1.5)


def test_as_channels_requires_positive_gap_and_names_it():
    assert as_channels([(0.1, 0.2)])[0] == Channel(0.1, 0.2)
    with pytest.raises(ValueError, match=r"channels\[1\] gap"):
        as_channels([(0.1, 0.2), (0.5, 0.5)])


def test_known_channels_fit():
    fit = known_channels([Channel(0.1, 0.2), Channel(0.0, 0.0)], prevalence=0.3)
    assert fit.method == "known" and fit.converged
    assert fit.diagnostics["min_gap"] == pytest.approx(0.7)
