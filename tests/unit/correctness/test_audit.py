"""AUROC, H_f, D_f, directional errors and false acceptance on small hand-computed examples (Rethinking Correctness 2026
§2-3)."""

import numpy as np
import pytest

from noisycal_platform.correctness.audit import (
    balanced_accuracy_by_group,
    directional_errors,
    error_detection_auroc,
    false_acceptance_by_category,
    human_validation_consistency,
    ue_distortion,
)


def test_error_detection_auroc_by_hand():
    # errors (positives) at u = 0.9 and 0.3; correct at 0.8, 0.3, 0.1.
    # pairs: 0.9 beats all three (3); 0.3 vs 0.8 -> 0, vs 0.3 -> 1/2, vs 0.1 -> 1  => 4.5 / 6
    u = [0.9, 0.8, 0.3, 0.3, 0.1]
    correct = [0, 1, 0, 1, 1]
    assert error_detection_auroc(u, correct) == pytest.approx(0.75)
    assert error_detection_auroc(u, np.asarray(correct, bool)) == pytest.approx(0.75)


def test_error_detection_auroc_one_class_is_nan():
    with pytest.warns(UserWarning, match="one class"):
        assert np.isnan(error_detection_auroc([0.1, 0.2], [1, 1]))
    with pytest.raises(ValueError, match="non-finite"):
        error_detection_auroc([np.nan, 0.2], [0, 1])
    with pytest.raises(ValueError, match="0/1"):
        error_detection_auroc([0.1, 0.2], [0, 2])


def test_h_f_by_hand():
    # group A: human correct [1,1,0,0], accepted [1,0,0,1]: TPR 1/2, TNR 1/2 -> 0.5
    # group B: human correct [1,0], accepted [1,0]: 1.0          H_f = (0.5 + 1.0) / 2
    acc = [1, 0, 0, 1, 1, 0]
    hc = [1, 1, 0, 0, 1, 0]
    g = ["A", "A", "A", "A", "B", "B"]
    groups, per = balanced_accuracy_by_group(acc, hc, g)
    assert list(groups) == ["A", "B"] and per == pytest.approx([0.5, 1.0])
    assert human_validation_consistency(acc, hc, g) == pytest.approx(0.75)
    # equal group weights: duplicating group B's rows does not change H_f
    assert human_validation_consistency([*acc, 1, 0], [*hc, 1, 0], [*g, "B", "B"]) == pytest.approx(0.75)


def test_h_f_group_with_one_class_uses_its_recall():
    from sklearn.metrics import balanced_accuracy_score

    acc, hc = [1, 0, 1], [1, 1, 1]
    _, per = balanced_accuracy_by_group(acc, hc, [0, 0, 0])
    with pytest.warns(UserWarning):
        assert per[0] == pytest.approx(balanced_accuracy_score(hc, acc))


def test_d_f_by_hand():
    # group 1: u = 1..4; human errors at u=3,4 -> AUROC 1; criterion errors at u=2,4 vs correct 1,3 -> 3/4
    # group 2: human = criterion -> difference 0.                       D_f = (0.25 + 0) / 2
    u = {"m": [1, 2, 3, 4, 1, 2, 3, 4]}
    human = [1, 1, 0, 0, 0, 1, 1, 0]
    crit = [1, 0, 1, 0, 0, 1, 1, 0]
    g = [1, 1, 1, 1, 2, 2, 2, 2]
    d, undefined = ue_distortion(u, crit, human, g)
    assert d == pytest.approx(0.125) and undefined == 0
    # a second method with reversed scores: group 1 |1/4 - 0| = 1/4, group 2 0 -> mean over 4 tasks = 0.125
    u2 = {"m": u["m"], "rev": [-x for x in u["m"]]}
    assert ue_distortion(u2, crit, human, g)[0] == pytest.approx(0.125)


def test_d_f_counts_undefined_tasks():
    d, undefined = ue_distortion({"m": [1, 2, 3]}, [1, 1, 1], [1, 0, 1], [0, 0, 0])
    assert np.isnan(d) and undefined == 1


def test_directional_errors():
    e = directional_errors([1, 0, 1, 0, 1], [1, 1, 0, 0, 1])
    assert (e.false_rejects, e.n_human_correct, e.false_accepts, e.n_human_incorrect) == (1, 3, 1, 2)


def test_false_acceptance_equal_group_mean():
    # group A: 2 invalid errors, 1 accepted (0.5); group B: 1 invalid error, accepted (1.0) -> 0.75, pooled
    # 2/3
    acc = [1, 0, 1, 1, 0]
    hc = [0, 0, 0, 1, 0]
    cat = ["invalid/uncertain", "invalid/uncertain", "invalid/uncertain", None, "extra/wrong"]
    g = ["A", "A", "B", "B", "B"]
    out = false_acceptance_by_category(acc, hc, cat, g)
    assert out["invalid/uncertain"] == {
        "rate": pytest.approx(0.75),
        "n_accepted": 2,
        "n_errors": 3,
        "n_groups": 2,
    }
    assert out["extra/wrong"]["rate"] == 0.0 and out["extra/wrong"]["n_groups"] == 1
    assert np.isnan(out["missing/partial"]["rate"]) and out["missing/partial"]["n_groups"] == 0
