"""collect_generations_openai against a stand-in OpenAI-compatible server started in the test on 127.0.0.1.

The server replies with token pieces and log-probabilities chosen here, so the expected answer-span
log-likelihoods are known by construction. Failure modes: no logprobs, a stream cut before [DONE], HTTP 500:
each a clear OpenAIServerError, and no generations file is written.
"""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from noisycal_platform.correctness import pipeline as cp
from noisycal_platform.correctness.collect import (
    UE_SUPPORT_FIELD,
    OpenAIServerError,
    PromptSpec,
    Sampling,
    collect_generations_openai,
    write_generations_jsonl,
)
from noisycal_platform.correctness.io import read_generations

PROMPTS = [
    PromptSpec("c1", "mcmed", "What is the disposition?", ("Discharge", "Admit"), ("Admit",), False, "pain"),
    PromptSpec("c2", "mcmed", "What is the disposition?", ("Discharge", "Admit"), ("Discharge",), False, "ok"),
]
ANSWERS = ["Admit", "Discharge", "Admit", "Admit"]  # sample j answers ANSWERS[j % 4]


def _pieces(answer: str, j: int) -> list[tuple[str, float]]:
    """Token pieces of '{"reasoning": "r", "answer": "<answer>"}' with log-probs; the answer is one piece."""
    return [('{"reasoning": ', -0.1), ('"r", ', -0.2), ('"answer": "', -0.3), (answer, -0.4 - 0.1 * j), ('"}', -0.5)]


class StandIn:
    def __init__(self, mode: str = "ok"):
        self.mode, self.requests = mode, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append({"path": self.path, "body": body})
                if outer.mode == "http500":
                    self.send_response(500)
                    self.end_headers()
                    self.wfile.write(b'{"error": "out of memory"}')
                    return
                chat = self.path.endswith("/chat/completions")
                greedy = body["temperature"] == 0
                start = body["seed"] - 1 if not greedy else 0
                choices = []
                for i in range(body["n"]):
                    j = start + i
                    pieces = _pieces("Admit" if greedy else ANSWERS[j % 4], j if not greedy else 0)
                    choices.append(outer._choice(i, pieces, chat, body))
                if body.get("stream"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    for c in choices:
                        for tok in c["_tokens"]:
                            delta = {"content": tok["token"]} if chat else None
                            lp = ({"content": [tok]} if chat else
                                  {"tokens": [tok["token"]], "token_logprobs": [tok["logprob"]], "top_logprobs": [{}]})
                            ch = {"index": c["index"], "logprobs": lp}
                            ch |= {"delta": delta} if chat else {"text": tok["token"]}
                            self.wfile.write(f"data: {json.dumps({'choices': [ch]})}\n\n".encode())
                    if outer.mode != "truncated":
                        self.wfile.write(b"data: [DONE]\n\n")
                    return
                for c in choices:
                    c.pop("_tokens")
                payload = json.dumps({"choices": choices}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _choice(self, i, pieces, chat, body):
        text = "".join(t for t, _ in pieces)
        toks = [{"token": t, "logprob": lp, "top_logprobs": [{"token": t, "logprob": lp}]} for t, lp in pieces]
        c = {"index": i, "finish_reason": "stop", "_tokens": toks}
        if chat:
            c["message"] = {"role": "assistant", "content": text}
        else:
            c["text"] = text
        if self.mode != "no_logprobs":
            c["logprobs"] = ({"content": toks} if chat else
                             {"tokens": [t for t, _ in pieces], "token_logprobs": [lp for _, lp in pieces],
                              "top_logprobs": [{t: lp} for t, lp in pieces]})
        return c

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def server(request):
    s = StandIn(getattr(request, "param", "ok"))
    yield s
    s.close()


@pytest.mark.parametrize("endpoint,stream", [("chat", False), ("chat", True), ("completions", False)])
def test_records_from_server_pass_the_contract(server, tmp_path, endpoint, stream):
    recs = collect_generations_openai(PROMPTS, model="srv", base_url=server.url, endpoint=endpoint,
                                      sampling=Sampling(n_samples=4, top_k=5, seed=1), stream=stream)
    path = write_generations_jsonl(recs, tmp_path / "gen.jsonl")
    gen = read_generations(path)
    assert gen.height == 2 and gen["answer"].to_list() == ["Admit", "Admit"]
    r = recs[0]
    assert r["vocab_size"] is None and r["answer_top_logits"] == [] and r["answer_logsumexp"] == []
    assert r[UE_SUPPORT_FIELD]["logtoku"].startswith("unavailable")
    assert r[UE_SUPPORT_FIELD]["self_certainty"].startswith("unavailable")
    assert r["sample_answers"] == [ANSWERS[j % 4] for j in range(1, 5)]
    # only the answer piece of each sample counts; its log-prob is -0.4 - 0.1 j (seed 1 -> j starts at 1)
    assert r["sample_token_logliks"] == [[pytest.approx(-0.4 - 0.1 * j)] for j in range(1, 5)]
    assert r["answer_top_logprobs"] == [{"Admit": -0.4}]
    bodies = [q["body"] for q in server.requests]
    greedy, samples = bodies[0], bodies[1]
    assert greedy["temperature"] == 0 and greedy["n"] == 1 and samples["n"] == 4 and samples["temperature"] == 1.0
    if endpoint == "chat":
        assert server.requests[0]["path"] == "/v1/chat/completions"
        assert greedy["logprobs"] is True and greedy["top_logprobs"] == 5
    else:
        assert server.requests[0]["path"] == "/v1/completions" and greedy["logprobs"] == 5
    # UE scores: logit-based ones unavailable (NaN, said so); answer entropy from the samples
    scores = cp.ue_scores(gen)
    assert scores["self_certainty"].is_nan().all() and scores["logtoku"].is_nan().all()
    assert scores["ue_unavailable"].str.contains("logtoku").all()
    p = np.array([3, 1]) / 4  # Admit x3, Discharge x1
    assert scores["answer_entropy"][0] == pytest.approx(-np.sum(p * np.log(p)), rel=1e-12)


@pytest.mark.parametrize(
    "server,stream,match",
    [("no_logprobs", False, "no logprobs"), ("truncated", True, "truncated"), ("http500", False, "HTTP 500")],
    indirect=["server"],
)
def test_server_failures_are_clear_and_write_nothing(server, tmp_path, stream, match):
    out = tmp_path / "gen.jsonl"
    with pytest.raises(OpenAIServerError, match=match):
        write_generations_jsonl(
            collect_generations_openai(
                PROMPTS, model="srv", base_url=server.url, sampling=Sampling(n_samples=2), stream=stream
            ),
            out,
        )
    assert not out.exists()


def test_bad_arguments():
    with pytest.raises(ValueError, match="endpoint"):
        collect_generations_openai(PROMPTS, model="m", endpoint="responses")
    with pytest.raises(ValueError, match="base_url"):
        collect_generations_openai(PROMPTS, model="m", base_url="127.0.0.1:8000")
    with pytest.raises(ValueError, match="temperature"):
        Sampling(temperature=0.0)
    with pytest.raises(ValueError, match="top_k"):
        Sampling(top_k=0)


def test_audit_collect_cli_sends_the_sampling_it_was_given(server, tmp_path):
    from dataclasses import asdict

    from orchestration.cli import main

    home = tmp_path / "home"
    home.mkdir()
    (home / "settings.json").write_text(json.dumps({"generation_model": "srv", "generation_base_url": server.url}))
    prompts = tmp_path / "cases.jsonl"
    prompts.write_text("".join(json.dumps(asdict(p)) + "\n" for p in PROMPTS), encoding="utf-8")
    argv = ["--home", str(home), "audit", "collect", "--prompts", str(prompts), "--samples", "3",
            "--top-logprobs", "5", "--seed", "2"]
    assert main(argv) == 0
    gen = read_generations(home / "correctness" / "generations" / "cases.jsonl")
    assert gen.height == 2 and (gen["sample_answers"].list.len() == 3).all()
    greedy, samples = server.requests[0]["body"], server.requests[1]["body"]
    # greedy request: temperature 0, seed as given; samples: n = --samples, seed + 1 for the first sample
    assert (greedy["temperature"], greedy["n"], greedy["seed"], greedy["top_logprobs"]) == (0, 1, 2, 5)
    assert (samples["temperature"], samples["n"], samples["seed"], samples["max_tokens"]) == (1.0, 3, 3, 96)
