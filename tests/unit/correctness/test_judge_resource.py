"""resources/judge.py: the Dagster resources hand the library a Judge (or None)."""

import json

import pytest

from noisycal_platform.correctness.criteria import (
    Judge,
    OpenAICompatibleJudge,
    judge_decision,
    judge_messages,
)
from resources.judge import CannedJudge, LocalEndpointJudge, NoJudge


def test_local_endpoint_judge_builds_client():
    j = LocalEndpointJudge(base_url="http://127.0.0.1:8000/v1", model="m", timeout_s=3).get_judge()
    assert isinstance(j, OpenAICompatibleJudge) and isinstance(j, Judge)
    assert (j.base_url, j.model, j.timeout_s) == ("http://127.0.0.1:8000/v1", "m", 3)
    with pytest.raises(ValueError, match="base_url"):
        LocalEndpointJudge(base_url="127.0.0.1:8000", model="m").get_judge()


def test_no_judge():
    assert NoJudge().get_judge() is None


def test_canned_judge_replies_and_default_is_not_an_acceptance():
    reply = json.dumps({"labels": ["Sepsis"], "invalid": False, "contradiction": False})
    j = CannedJudge(replies_json=json.dumps({"sepsis": reply})).get_judge()
    assert isinstance(j, Judge)
    assert j.complete(judge_messages("q", ["Sepsis", "AKI"], "sepsis")) == reply
    other = j.complete(judge_messages("q", ["Sepsis", "AKI"], "something else"))
    assert not judge_decision(other, ["Sepsis", "AKI"], ["Sepsis"], multi_label=True).accepted
    with pytest.raises(ValueError, match="JSON object"):
        CannedJudge(replies_json="[1]").get_judge()
