"""ROUGE-L against rouge-score, non-ASCII folding, judge deterministic step (incl. malformed replies) and the
HTTP judge against a local stand-in server."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
from rouge_score import rouge_scorer

from noisycal_platform.correctness.criteria import (
    FoldingTokenizer,
    OpenAICompatibleJudge,
    judge_decision,
    judge_messages,
    nli_decision,
    reference_text,
    rouge_l,
    rouge_l_decision,
    similarity_decision,
)

PAIRS = [
    ("pleural effusion", "Pleural effusions are present"),
    ("Sepsis, Acute kidney failure", "Acute kidney failure, Sepsis"),
    ("The patient was admitted to the ICU.", "ICU"),
    ("none", "none"),
    ("Congestive heart failure", "Acute kidney failure"),
    ("a_b c-d e/f", "a b c d e f"),
    ("running runs ran", "run running"),
    ("12 mg of X2", "x2 12mg"),
    ("", "Sepsis"),
]


@pytest.mark.parametrize("use_stemmer", [True, False])
@pytest.mark.parametrize(("pred", "target"), PAIRS)
def test_rouge_l_equals_rouge_score_on_ascii(pred, target, use_stemmer):
    peer = (
        rouge_scorer.RougeScorer(["rougeL"], use_stemmer=use_stemmer).score(target, pred)["rougeL"].fmeasure
    )
    assert rouge_l(pred, target, use_stemmer=use_stemmer) == pytest.approx(peer, abs=1e-12)


def test_folding_tokenizer_matches_default_tokenizer_on_ascii():
    from rouge_score.tokenizers import DefaultTokenizer

    rng = np.random.default_rng(0)
    alphabet = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ,.;-_/()'")
    for stem in (True, False):
        ours, peer = FoldingTokenizer(stem), DefaultTokenizer(stem)
        for _ in range(300):
            s = "".join(rng.choice(alphabet, size=int(rng.integers(0, 40))))
            assert ours.tokenize(s) == peer.tokenize(s), s


@pytest.mark.parametrize("text", ["œdème pulmonaire", "肺炎", "Pneumonía", "Ödem, Sepsis"])
def test_identical_non_ascii_strings_score_one(text):
    # rouge-score's own tokenizer drops every non-ASCII character and scores these 0.
    assert rouge_l(text, text) == pytest.approx(1.0)


def test_accents_are_folded():
    assert rouge_l("Pneumonía", "pneumonia") == pytest.approx(1.0)
    assert rouge_l("肺炎", "sepsis") == 0.0


def test_rouge_decision_thresholds_and_invalid():
    assert rouge_l_decision(0.30, 0.30, "x").accepted
    assert not rouge_l_decision(0.2999, 0.30, "x").accepted
    d = rouge_l_decision(float("nan"), 0.2, None)
    assert not d.accepted and d.invalid


def test_reference_text():
    assert reference_text([]) == "none"
    assert reference_text(["Sepsis", "Acute kidney failure"]) == "Acute kidney failure, Sepsis"


def test_similarity_and_nli_decisions():
    assert similarity_decision(0.5, 0.5, "a", "m").accepted
    assert not similarity_decision(0.49, 0.5, "a", "m").accepted
    assert not similarity_decision(0.99, 0.5, None, "m").accepted
    cands = ["A", "B", "C"]
    assert nli_decision([0.9, 0.6, 0.1], cands, ["A", "B"], answer="x", multi_label=True).accepted
    assert not nli_decision([0.9, 0.4, 0.1], cands, ["A", "B"], answer="x", multi_label=True).accepted
    assert not nli_decision([0.9, 0.6, 0.1], cands, ["A"], answer="x", multi_label=False).accepted
    assert nli_decision([0.1, 0.2, 0.3], cands, [], answer="x", multi_label=True).accepted
    with pytest.raises(ValueError, match="entail_probs"):
        nli_decision([0.9], cands, ["A"], answer="x", multi_label=True)


CANDS = ["Acute kidney failure", "Sepsis", "Congestive heart failure"]


def _reply(labels, invalid=False, contradiction=False):
    return json.dumps({"labels": labels, "invalid": invalid, "contradiction": contradiction})


# (reply, reference, multi_label, accepted, invalid)
JUDGE_CASES = [
    (_reply(["Sepsis"]), ["Sepsis"], True, True, False),
    (_reply(["sepsis"]), ["Sepsis"], True, True, False),
    (_reply(["Sepsis", "Acute kidney failure"]), ["Acute kidney failure", "Sepsis"], True, True, False),
    ("```json\n" + _reply(["Sepsis"]) + "\n```", ["Sepsis"], True, True, False),
    (_reply([]), [], True, True, False),
    (_reply(["Sepsis"]), ["Acute kidney failure", "Sepsis"], True, False, False),  # missing
    (_reply(["Sepsis", "Pneumonia"]), ["Sepsis"], True, False, True),  # out of space
    (_reply(["Sepsis"], invalid=True), ["Sepsis"], True, False, True),  # flagged invalid
    (_reply(["Sepsis"], contradiction=True), ["Sepsis"], True, False, True),  # contradiction
    (_reply(["Sepsis", "Acute kidney failure"]), ["Sepsis"], False, False, False),  # single-label, two
    ("Sepsis", ["Sepsis"], True, False, True),  # not JSON
    ('{"labels": ["Sepsis"]', ["Sepsis"], True, False, True),  # truncated
    ('{"labels": "Sepsis", "invalid": false, "contradiction": false}', ["Sepsis"], True, False, True),
    ('{"labels": ["Sepsis"], "invalid": "no", "contradiction": false}', ["Sepsis"], True, False, True),
    ('{"labels": ["Sepsis"]}', ["Sepsis"], True, False, True),  # missing flags
    ('["Sepsis"]', ["Sepsis"], True, False, True),
    ("", ["Sepsis"], True, False, True),
    (None, ["Sepsis"], True, False, True),
]


@pytest.mark.parametrize(("reply", "ref", "multi", "accepted", "invalid"), JUDGE_CASES)
def test_judge_decision_table(reply, ref, multi, accepted, invalid):
    d = judge_decision(reply, CANDS, ref, multi_label=multi)
    assert (d.accepted, d.invalid) == (accepted, invalid), d.reason


def test_judge_messages_hold_question_labels_and_answer_only():
    msgs = judge_messages("Which phenotypes?", CANDS, "Sepsis")
    text = json.dumps(msgs)
    assert (
        "Which phenotypes?" in text and "Congestive heart failure" in text and "Model answer: Sepsis" in text
    )
    assert "reference" not in text.lower() and "reasoning" not in msgs[-1]["content"].lower()


class _StandIn:
    """A local OpenAI-compatible stand-in: replies with the next queued body, records every request."""

    def __init__(self):
        self.queue: list[tuple[int, str]] = []
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append({"path": self.path, "body": body})
                status, payload = outer.queue.pop(0)
                data = payload.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def reply(self, content: str, status: int = 200):
        self.queue.append(
            (status, json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}))
        )

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stand_in():
    s = _StandIn()
    yield s
    s.close()


def test_http_judge_round_trip(stand_in):
    judge = OpenAICompatibleJudge(base_url=stand_in.url, model="local-judge", timeout_s=5)
    stand_in.reply(_reply(["Sepsis"]))
    stand_in.reply("I think it's sepsis")
    msgs = judge_messages("Which phenotypes?", CANDS, "sepsis")
    first = judge.complete(msgs)
    assert judge_decision(first, CANDS, ["Sepsis"], multi_label=True).accepted
    second = judge.complete(msgs)
    d = judge_decision(second, CANDS, ["Sepsis"], multi_label=True)
    assert not d.accepted and d.invalid
    req = stand_in.requests[0]
    assert req["path"] == "/v1/chat/completions"
    assert req["body"]["model"] == "local-judge" and req["body"]["temperature"] == 0
    assert req["body"]["messages"] == msgs


def test_http_judge_errors_raise(stand_in):
    import httpx

    judge = OpenAICompatibleJudge(base_url=stand_in.url, model="m", timeout_s=5)
    stand_in.queue.append((500, "{}"))
    with pytest.raises(httpx.HTTPStatusError):
        judge.complete(judge_messages("q", CANDS, "a"))
    stand_in.queue.append((200, json.dumps({"choices": []})))
    with pytest.raises(ValueError, match="choices"):
        judge.complete(judge_messages("q", CANDS, "a"))


def test_bem_decision_threshold_and_unparseable():
    from noisycal_platform.correctness.criteria import bem_decision

    assert bem_decision(0.5, 0.5, "a").accepted  # the seed's rule: BEM >= 0.50 accepts
    assert not bem_decision(0.4999, 0.5, "a").accepted
    d = bem_decision(0.9, 0.5, None)
    assert not d.accepted and d.invalid
    assert bem_decision(float("nan"), 0.5, "a").invalid
