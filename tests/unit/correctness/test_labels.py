"""EM normalisation, table-driven (Rethinking Correctness 2026 §3.1): Unicode, punctuation, order, "none",
out-of-space, partial,
extra, single-label tasks with two labels; plus parsing of the model's JSON output."""

import pytest

from noisycal_platform.correctness.criteria import exact_match
from noisycal_platform.correctness.labels import canonical_labels, parse_model_output

PHENO = ["Acute kidney failure", "Sepsis", "Fluid and electrolyte disorders", "Congestive heart failure"]
DISPO = ["Discharge", "Observation", "Admit", "ICU"]

# (answer, candidates, reference, multi_label, expected canonical set or None, expected accept)
CASES = [
    ("Sepsis", PHENO, ["Sepsis"], True, {"Sepsis"}, True),
    ("sepsis", PHENO, ["Sepsis"], True, {"Sepsis"}, True),
    ("SEPSIS.", PHENO, ["Sepsis"], True, {"Sepsis"}, True),
    ("  Sepsis!  ", PHENO, ["Sepsis"], True, {"Sepsis"}, True),
    ("Ｓｅｐｓｉｓ", PHENO, ["Sepsis"], True, {"Sepsis"}, True),  # fullwidth (NFKC)
    ("Acute\u00a0kidney\u2003failure", PHENO, ["Acute kidney failure"], True, {"Acute kidney failure"}, True),
    ("acute-kidney failure", PHENO, ["Acute kidney failure"], True, {"Acute kidney failure"}, True),
    (
        "Sepsis, Acute kidney failure",
        PHENO,
        ["Acute kidney failure", "Sepsis"],
        True,
        {"Sepsis", "Acute kidney failure"},
        True,
    ),  # order
    (
        "acute kidney failure; sepsis",
        PHENO,
        ["Acute kidney failure", "Sepsis"],
        True,
        {"Sepsis", "Acute kidney failure"},
        True,
    ),
    (
        "Sepsis and acute kidney failure",
        PHENO,
        ["Acute kidney failure", "Sepsis"],
        True,
        {"Sepsis", "Acute kidney failure"},
        True,
    ),
    (
        "Sepsis\nAcute kidney failure",
        PHENO,
        ["Acute kidney failure", "Sepsis"],
        True,
        {"Sepsis", "Acute kidney failure"},
        True,
    ),
    ("Sepsis, sepsis", PHENO, ["Sepsis"], True, {"Sepsis"}, True),  # duplicates collapse
    (
        "Fluid and electrolyte disorders",
        PHENO,
        ["Fluid and electrolyte disorders"],
        True,
        {"Fluid and electrolyte disorders"},
        True,
    ),  # "and" inside a label
    (
        "Sepsis, fluid and electrolyte disorders",
        PHENO,
        ["Fluid and electrolyte disorders", "Sepsis"],
        True,
        {"Sepsis", "Fluid and electrolyte disorders"},
        True,
    ),
    ("none", PHENO, [], True, set(), True),
    ("None.", PHENO, [], True, set(), True),
    ("NONE", PHENO, ["Sepsis"], True, set(), False),
    ("Sepsis", PHENO, ["Acute kidney failure", "Sepsis"], True, {"Sepsis"}, False),  # partial
    (
        "Sepsis, Congestive heart failure",
        PHENO,
        ["Sepsis"],
        True,
        {"Sepsis", "Congestive heart failure"},
        False,
    ),  # extra label
    ("Septic shock", PHENO, ["Sepsis"], True, None, False),  # out of space
    ("Sepsis, pneumonia", PHENO, ["Sepsis"], True, None, False),  # one piece out of space
    ("AKI", PHENO, ["Acute kidney failure"], True, None, False),  # no synonym expansion
    ("Sepsis or acute kidney failure", PHENO, ["Sepsis"], True, None, False),  # uncertain
    ("Possibly sepsis", PHENO, ["Sepsis"], True, None, False),
    ("none, sepsis", PHENO, ["Sepsis"], True, None, False),
    ("", PHENO, [], True, None, False),
    ("Admit", DISPO, ["Admit"], False, {"Admit"}, True),
    ("admit.", DISPO, ["Admit"], False, {"Admit"}, True),
    ("Admit, ICU", DISPO, ["ICU"], False, {"Admit", "ICU"}, False),  # single-label, two
    ("Admit, ICU", DISPO, ["Admit"], False, {"Admit", "ICU"}, False),
    ("none", DISPO, ["Admit"], False, set(), False),
    ("ICU/Admit", DISPO, ["ICU"], False, {"Admit", "ICU"}, False),
]


@pytest.mark.parametrize(("answer", "cands", "ref", "multi", "canon", "accept"), CASES)
def test_exact_match_table(answer, cands, ref, multi, canon, accept):
    got = canonical_labels(answer, cands)
    assert got == (None if canon is None else frozenset(canon))
    d = exact_match(answer, cands, ref, multi_label=multi)
    assert d.accepted is accept
    assert d.invalid is (canon is None)
    assert d.reason


def test_label_containing_separator_is_matched_whole():
    cands = ["ICU/step-down", "Ward"]
    assert canonical_labels("icu / step down", cands) == frozenset({"ICU/step-down"})
    assert canonical_labels("Ward, ICU/step-down", cands) == frozenset({"ICU/step-down", "Ward"})


def test_exact_match_rejects_bad_arguments():
    with pytest.raises(ValueError, match="reference_labels"):
        exact_match("Sepsis", PHENO, ["Pneumonia"])
    with pytest.raises(ValueError, match="candidate_labels"):
        exact_match("Sepsis", [], [])
    with pytest.raises(ValueError, match="normalise to the same"):
        canonical_labels("x", ["Sepsis", "sepsis."])


def test_no_answer_is_invalid():
    d = exact_match(None, PHENO, ["Sepsis"])
    assert not d.accepted and d.invalid


@pytest.mark.parametrize(
    ("raw", "answer", "error"),
    [
        ('{"reasoning": "r", "answer": "Sepsis"}', "Sepsis", False),
        ('```json\n{"reasoning": "r", "answer": "Sepsis"}\n```', "Sepsis", False),
        ('{"reasoning": "r", "answer": "Seps', None, True),  # truncated
        ('["Sepsis"]', None, True),  # not an object
        ('{"reasoning": "r", "answer": ["Sepsis"]}', None, True),  # answer not a string
        ("Sepsis", None, True),  # no JSON at all
    ],
)
def test_parse_model_output(raw, answer, error):
    p = parse_model_output(raw)
    assert p.answer == answer
    assert (p.error is not None) is error
