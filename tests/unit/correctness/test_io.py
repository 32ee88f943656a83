"""Input readers: errors name file, line/row and field; malformed model output is kept and counted invalid."""

import json

import pytest

from noisycal_platform.correctness.io import CorrectnessInputError, read_audit_labels, read_generations


def _record(**over):
    r = {
        "case_id": "c1",
        "dataset": "mcmed",
        "model": "m1",
        "task_question": "Disposition?",
        "candidate_labels": ["Discharge", "Admit"],
        "reference_labels": ["Admit"],
        "multi_label": False,
        "raw_output": json.dumps({"reasoning": "r", "answer": "Admit"}),
        "answer_top_logits": [[20.0, 18.0, 3.0], [25.0, 10.0, 9.0]],
        "answer_logsumexp": [20.2, 25.1],
        "answer_mean_logit": [-2.0, -1.5],
        "vocab_size": 1000,
        "sample_answers": ["Admit", "Discharge"],
        "sample_token_logliks": [[-0.1, -0.2], [-1.0]],
    }
    r.update(over)
    return r


def _write(tmp_path, records, name="g.jsonl"):
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return p


def test_reads_valid_records_and_keeps_malformed_output(tmp_path):
    p = _write(tmp_path, [_record(), _record(case_id="c2", raw_output='{"reasoning": "r", "answer": "Adm')])
    g = read_generations(p)
    assert g.height == 2
    assert g["answer"].to_list() == ["Admit", None]
    assert g["parse_error"][0] is None and "malformed" in g["parse_error"][1]
    assert g["source_line"].to_list() == [1, 2]
    assert g["answer_top_logits"][0].to_list() == [[20.0, 18.0, 3.0], [25.0, 10.0, 9.0]]


def test_reads_a_folder(tmp_path):
    _write(tmp_path, [_record()], "a.jsonl")
    _write(tmp_path, [_record(case_id="c9")], "b.jsonl")
    assert read_generations(tmp_path).height == 2


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"case_id": ""}, "case_id"),
        ({"candidate_labels": []}, "candidate_labels"),
        ({"candidate_labels": ["A", "A"]}, "candidate_labels"),
        ({"reference_labels": ["ICU"]}, "reference_labels"),
        ({"reference_labels": ["Admit", "Discharge"]}, "reference_labels"),  # single-label task, two refs
        ({"multi_label": "no"}, "multi_label"),
        ({"vocab_size": 1}, "vocab_size"),
        ({"answer_top_logits": [[20.0]]}, "answer_top_logits"),
        ({"answer_logsumexp": [20.2]}, "answer_logsumexp"),
        ({"answer_logsumexp": [10.0, 25.1]}, "answer_logsumexp"),  # below the top logit
        ({"answer_mean_logit": [-2.0, float("nan")]}, "answer_mean_logit"),
        ({"sample_token_logliks": [[-0.1]]}, "sample_token_logliks"),
        ({"sample_token_logliks": [[0.5], [-1.0]]}, "sample_token_logliks"),
    ],
)
def test_bad_record_names_file_line_and_field(tmp_path, over, field):
    p = _write(tmp_path, [_record(case_id="ok"), _record(**over)])
    with pytest.raises(CorrectnessInputError) as exc:
        read_generations(p)
    assert exc.value.field == field and exc.value.location == "line 2" and exc.value.path == p
    assert str(p) in str(exc.value) and field in str(exc.value)


def test_invalid_json_line_and_duplicate_key(tmp_path):
    p = tmp_path / "g.jsonl"
    p.write_text(json.dumps(_record()) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(CorrectnessInputError, match="line 2"):
        read_generations(p)
    p2 = _write(tmp_path, [_record(), _record()], "dup.jsonl")
    with pytest.raises(CorrectnessInputError, match="duplicate"):
        read_generations(p2)


AUDIT_HEADER = "dataset,model,case_id,human_correct,error_category,em_stratum,decision\n"


def test_reads_audit_csv(tmp_path):
    p = tmp_path / "a.csv"
    p.write_text(
        AUDIT_HEADER + "mcmed,m1,c1,1,,EM-accepted,independent\n"
        "mcmed,m1,c2,0,invalid/uncertain,EM-rejected,joint\n",
        encoding="utf-8",
    )
    a = read_audit_labels(p)
    assert a["human_correct"].to_list() == [True, False]
    assert a["error_category"].to_list() == [None, "invalid/uncertain"]


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ("mcmed,m1,c1,yes?,,EM-accepted,independent", "human_correct"),
        ("mcmed,m1,c1,1,extra/wrong,EM-accepted,independent", "error_category"),
        ("mcmed,m1,c1,0,wrong,EM-rejected,independent", "error_category"),
        ("mcmed,m1,c1,0,,EM-rejected,independent", "error_category"),
        ("mcmed,m1,c1,1,,accepted,independent", "em_stratum"),
        ("mcmed,m1,c1,1,,EM-accepted,maybe", "decision"),
        ("mcmed,m1,,1,,EM-accepted,independent", "case_id"),
    ],
)
def test_bad_audit_row_names_file_row_and_field(tmp_path, row, field):
    p = tmp_path / "a.csv"
    p.write_text(AUDIT_HEADER + "mcmed,m1,c0,1,,EM-accepted,independent\n" + row + "\n", encoding="utf-8")
    with pytest.raises(CorrectnessInputError) as exc:
        read_audit_labels(p)
    assert exc.value.field == field and exc.value.location == "row 2"


def test_audit_missing_column(tmp_path):
    p = tmp_path / "a.csv"
    p.write_text("case_id,human_correct\nc1,1\n", encoding="utf-8")
    with pytest.raises(CorrectnessInputError, match="error_category"):
        read_audit_labels(p)
