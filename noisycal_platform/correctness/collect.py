"""Produce generation records (io.GENERATION_FIELDS) from a local Hugging Face causal LM, or from a local
OpenAI-compatible server (vLLM, llama.cpp server, TGI; ``collect_generations_openai``).

For each prompt: a greedy answer with, per answer token, the top-K raw logits, logsumexp and mean over the full
logits dimension and V (enough for Self-Certainty and LogTokU exactly: Kang et al. 2025; Ma et al. 2025, arXiv
2502.00290), plus N sampled answers with the log-likelihood of each sampled answer token. "Answer tokens" are the
tokens overlapping the JSON "answer" value; if the output does not parse, all generated tokens are used.
torch/transformers are imported inside (optional `llm` extra); nothing is downloaded (local_files_only).

A server returns log-probabilities (log-softmax values), not raw logits, and only the top-K of them. Its
records therefore carry no answer-token logits (``answer_top_logits`` etc. empty, ``vocab_size`` null) and
say so in ``ue_support`` (UE_SUPPORT_FIELD): LogTokU needs raw logits and Self-Certainty the full-vocabulary
distribution, so both are "unavailable" (never approximated); Answer Entropy and Semantic Entropy come from
the K samples and the sampled tokens' log-probabilities. The greedy answer's top-K log-probabilities are
kept in ``answer_top_logprobs`` for reference.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from noisycal_platform.correctness.labels import parse_model_output

__all__ = [
    "LOCAL_SERVER_URL",
    "UE_SUPPORT_FIELD",
    "OpenAIServerError",
    "PromptSpec",
    "Sampling",
    "build_messages",
    "collect_generations",
    "collect_generations_openai",
    "load_causal_lm",
    "server_ue_support",
    "write_generations_jsonl",
]


@dataclass(frozen=True)
class PromptSpec:
    """One case to ask the model about; `context` is the textual record shown to the model."""

    case_id: str
    dataset: str
    task_question: str
    candidate_labels: tuple[str, ...]
    reference_labels: tuple[str, ...]
    multi_label: bool
    context: str = ""


@dataclass(frozen=True)
class Sampling:
    """How each prompt is decoded: one greedy answer plus `n_samples` sampled answers.

    n_samples: sampled answers per prompt (the K of Answer and Semantic Entropy; a server's ``n``).
    temperature: softmax temperature of the sampled answers (> 0); the greedy answer is argmax / temperature 0.
    max_tokens: most tokens generated per answer (the local model's ``max_new_tokens``; a server's
        ``max_tokens``).
    top_k: per greedy answer token, the local model records the K largest raw logits; a server is asked for the
        K largest log-probabilities (chat ``logprobs: true, top_logprobs: K``; completions ``logprobs: K``).
    seed: seeds the sampled answers (local: a torch generator seeded with it draws one seed per sample; server:
        ``seed`` on the greedy request, ``seed + 1 + j`` on the request that starts at sample j).
    """

    n_samples: int = 10
    temperature: float = 1.0
    max_tokens: int = 96
    top_k: int = 20
    seed: int = 0

    def __post_init__(self) -> None:
        if self.n_samples < 1 or self.max_tokens < 1 or self.top_k < 1 or not self.temperature > 0:
            raise ValueError(
                f"Sampling needs n_samples >= 1, max_tokens >= 1, top_k >= 1, temperature > 0; got "
                f"n_samples={self.n_samples}, max_tokens={self.max_tokens}, top_k={self.top_k}, "
                f"temperature={self.temperature}"
            )


def build_messages(p: PromptSpec) -> list[dict[str, str]]:
    """Chat messages asking for JSON {"reasoning": ..., "answer": ...} naming candidate labels."""
    how = (
        "one or more of the candidate labels separated by commas, or none"
        if p.multi_label
        else "exactly one of the candidate labels"
    )
    system = (
        'Answer with one JSON object and nothing else: {"reasoning": "<short reasoning>", "answer": "<'
        + how
        + '>"}.'
    )
    user = f"{p.context}\n\nQuestion: {p.task_question}\nCandidate labels: {', '.join(p.candidate_labels)}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user.strip()}]


def load_causal_lm(model_dir: str | Path, *, gguf_file: str | None = None, device: str = "cpu"):
    """(tokenizer, model) from a local directory; a single *.gguf in it is used when gguf_file is None."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise FileNotFoundError(f"model_dir {model_dir} is not a directory")
    if gguf_file is None and not (model_dir / "config.json").is_file():
        ggufs = sorted(model_dir.glob("*.gguf"))
        if len(ggufs) != 1:
            raise FileNotFoundError(f"model_dir {model_dir} has no config.json and {len(ggufs)} .gguf files")
        gguf_file = ggufs[0].name
    kw: dict[str, Any] = {"local_files_only": True}
    if gguf_file is not None:
        kw["gguf_file"] = gguf_file
    tok = AutoTokenizer.from_pretrained(model_dir, **kw)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, **kw).to(device).eval()
    return tok, model


def _prompt_ids(tok, p: PromptSpec):
    msgs = build_messages(p)
    if getattr(tok, "chat_template", None):
        text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    else:
        text = "\n\n".join(m["content"] for m in msgs) + "\n\n"
    enc = tok(text, return_tensors="pt", add_special_tokens=False)
    return {k: v for k, v in enc.items() if k in ("input_ids", "attention_mask")}


def _trim(ids: list[int], eos: set[int]) -> list[int]:
    for i, t in enumerate(ids):
        if t in eos:
            return ids[:i]
    return ids


def _answer_token_mask(tok, ids: list[int]) -> tuple[str, list[bool]]:
    """(decoded text, mask of tokens overlapping the JSON answer value; all True if it cannot be located)."""
    text = tok.decode(ids, skip_special_tokens=True)
    ends = [len(tok.decode(ids[: i + 1], skip_special_tokens=True)) for i in range(len(ids))]
    parsed = parse_model_output(text)
    if parsed.answer is None or not parsed.answer:
        return text, [True] * len(ids)
    key = text.find('"answer"')
    val = json.dumps(parsed.answer, ensure_ascii=False)[1:-1]
    start = text.find(val, key if key >= 0 else 0)
    if start < 0:
        return text, [True] * len(ids)
    stop = start + len(val)
    starts = [0, *ends[:-1]]
    mask = [s < stop and e > start for s, e in zip(starts, ends, strict=True)]
    return text, mask if any(mask) else [True] * len(ids)


def _prompt_fields(p: PromptSpec, model: str) -> dict[str, Any]:
    """The fields of a generation record that come from its prompt (and the model's name)."""
    return {
        "case_id": p.case_id,
        "dataset": p.dataset,
        "model": model,
        "task_question": p.task_question,
        "candidate_labels": list(p.candidate_labels),
        "reference_labels": list(p.reference_labels),
        "multi_label": p.multi_label,
    }


def _sample_answer(text: str) -> str:
    """A sampled reply's answer (``parse_model_output``), or the raw text when none parses."""
    parsed = parse_model_output(text)
    return parsed.answer if parsed.answer is not None else text


def collect_generations(
    model_dir: str | Path,
    prompts: Sequence[PromptSpec],
    *,
    model_name: str | None = None,
    sampling: Sampling = Sampling(),
    gguf_file: str | None = None,
    device: str = "cpu",
    loaded: tuple[Any, Any] | None = None,
) -> list[dict[str, Any]]:
    """Greedy answer + `sampling.n_samples` samples per prompt (``max_new_tokens=sampling.max_tokens``; the
    top `sampling.top_k` raw logits per greedy answer token), recorded exactly as io.GENERATION_FIELDS (one dict
    each). LogTokU reads the two largest logits per token (Ma et al. 2025), so top_k must be >= 2 here."""
    if sampling.top_k < 2:
        raise ValueError(f"collect_generations needs sampling.top_k >= 2 (LogTokU uses the top 2 logits), got "
                         f"{sampling.top_k}")
    import torch

    tok, model = (
        loaded if loaded is not None else load_causal_lm(model_dir, gguf_file=gguf_file, device=device)
    )
    name = model_name or Path(model_dir).name
    eos = {
        int(x)
        for x in (
            [model.generation_config.eos_token_id]
            if isinstance(model.generation_config.eos_token_id, int)
            else (model.generation_config.eos_token_id or [])
        )
    }
    if tok.eos_token_id is not None:
        eos.add(int(tok.eos_token_id))
    pad = tok.pad_token_id if tok.pad_token_id is not None else next(iter(eos), 0)
    gen = torch.Generator(device="cpu").manual_seed(sampling.seed)
    # both decodes return the raw logits of every generated step
    decode = dict(
        max_new_tokens=sampling.max_tokens, output_logits=True, return_dict_in_generate=True, pad_token_id=pad
    )
    records = []
    for p in prompts:
        enc = {k: v.to(device) for k, v in _prompt_ids(tok, p).items()}
        n_in = enc["input_ids"].shape[1]
        with torch.inference_mode():
            out = model.generate(**enc, **decode, do_sample=False, temperature=None, top_p=None, top_k=None)
        ids = _trim(out.sequences[0, n_in:].tolist(), eos)
        text, mask = _answer_token_mask(tok, ids)
        top, lse, mean = [], [], []
        for t, keep in enumerate(mask):
            if not keep:
                continue
            z = out.logits[t][0].double()
            top.append(torch.topk(z, sampling.top_k).values.tolist())
            lse.append(float(torch.logsumexp(z, 0)))
            mean.append(float(z.mean()))
        vocab = int(out.logits[0].shape[-1]) if out.logits else int(model.config.vocab_size)
        answers, lls = [], []
        for _ in range(sampling.n_samples):
            torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))
            with torch.inference_mode():
                s = model.generate(
                    **enc, **decode, do_sample=True, temperature=sampling.temperature, top_k=0, top_p=1.0
                )
            sids = _trim(s.sequences[0, n_in:].tolist(), eos)
            stext, smask = _answer_token_mask(tok, sids)
            if not sids:
                sids, smask, stext = s.sequences[0, n_in : n_in + 1].tolist(), [True], ""
            logp = [
                float(torch.log_softmax(s.logits[t][0].double(), 0)[sid])
                for t, (sid, keep) in enumerate(zip(sids, smask, strict=True))
                if keep
            ]
            answers.append(_sample_answer(stext))
            lls.append([min(x, 0.0) for x in logp])
        records.append(
            {
                **_prompt_fields(p, name),
                "raw_output": text,
                "answer_top_logits": top,
                "answer_logsumexp": lse,
                "answer_mean_logit": mean,
                "vocab_size": vocab,
                "sample_answers": answers,
                "sample_token_logliks": lls,
            }
        )
    return records


def write_generations_jsonl(records: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Write records as JSONL (one object per line, UTF-8), atomically: the file is complete or absent."""
    from noisycal_platform.files import atomic_write_text

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))


# ------------------------------------------------------------------------------ OpenAI-compatible server

LOCAL_SERVER_URL = "http://127.0.0.1:8000/v1"
UE_SUPPORT_FIELD = "ue_support"


class OpenAIServerError(RuntimeError):
    """The server's reply cannot be used (HTTP error, missing logprobs, truncated stream, bad JSON)."""


def server_ue_support() -> dict[str, str]:
    """Which UE scores a server's output (top-K log-probabilities + K samples) supports, and why not."""
    return {
        "self_certainty": "unavailable: needs the full-vocabulary distribution per answer token; a server "
        "returns only the top-K log-probabilities (a bound, not the score)",
        "logtoku": "unavailable: needs raw pre-softmax logits; a server returns log-softmax values",
        "answer_entropy": "available: from the K sampled answers",
        "semantic_entropy": "available: from the K sampled answers and their token log-probabilities (NLI model "
        "needed for the clusters)",
    }


def _answer_mask_from_ends(text: str, ends: list[int]) -> list[bool]:
    """Mask of tokens (given by their end offsets in `text`) overlapping the JSON answer value; all True if the
    value cannot be located."""
    parsed = parse_model_output(text)
    if not parsed.answer:
        return [True] * len(ends)
    key = text.find('"answer"')
    val = json.dumps(parsed.answer, ensure_ascii=False)[1:-1]
    start = text.find(val, key if key >= 0 else 0)
    if start < 0:
        return [True] * len(ends)
    stop = start + len(val)
    starts = [0, *ends[:-1]]
    mask = [a < stop and e > start for a, e in zip(starts, ends, strict=True)]
    return mask if any(mask) else [True] * len(ends)


def _choice_tokens(choice: dict, chat: bool, where: str) -> list[tuple[str, float, dict[str, float]]]:
    """(token text, log-prob, top log-probs) per generated token of one choice."""
    lp = choice.get("logprobs")
    if not isinstance(lp, dict):
        raise OpenAIServerError(f"{where}: no logprobs in the reply (the server must honour logprobs/top_logprobs)")
    try:
        if chat:
            return [
                (
                    str(t["token"]),
                    float(t["logprob"]),
                    {str(x["token"]): float(x["logprob"]) for x in t.get("top_logprobs") or []},
                )
                for t in lp.get("content") or []
            ]
        tops = lp.get("top_logprobs") or [{}] * len(lp["tokens"])
        return [
            (str(t), float(v), {str(k): float(x) for k, x in (top or {}).items()})
            for t, v, top in zip(lp["tokens"], lp["token_logprobs"], tops, strict=True)
        ]
    except (KeyError, TypeError, ValueError) as exc:
        raise OpenAIServerError(f"{where}: malformed logprobs ({type(exc).__name__}: {exc})") from None


def _merge_stream(lines: list[str], where: str) -> dict:
    """Fold server-sent-event chunks into one non-streamed reply; the stream must end with ``data: [DONE]``."""
    choices: dict[int, dict] = {}
    done = False
    n_chunks = 0
    for line in lines:
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            done = True
            break
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError:
            raise OpenAIServerError(f"{where}: stream chunk {n_chunks + 1} is not JSON") from None
        n_chunks += 1
        for c in chunk.get("choices") or []:
            acc = choices.setdefault(int(c.get("index", 0)), {"text": "", "content": [], "tokens": [],
                                                               "token_logprobs": [], "top_logprobs": [],
                                                               "finish_reason": None})
            delta = c.get("delta")
            piece = delta.get("content") if isinstance(delta, dict) else c.get("text")
            acc["text"] += piece if isinstance(piece, str) else ""
            lp = c.get("logprobs")
            if isinstance(lp, dict):
                acc["content"] += lp.get("content") or []
                for k in ("tokens", "token_logprobs", "top_logprobs"):
                    acc[k] += lp.get(k) or []
                acc["has_lp"] = True
            acc["finish_reason"] = c.get("finish_reason") or acc["finish_reason"]
    if not done:
        raise OpenAIServerError(f"{where}: the stream ended after {n_chunks} chunks without [DONE] (truncated)")
    out = []
    for i in sorted(choices):
        a = choices[i]
        lp = None
        if a.get("has_lp"):
            lp = {"content": a["content"]} if a["content"] else {k: a[k] for k in ("tokens", "token_logprobs",
                                                                                   "top_logprobs")}
        out.append({"index": i, "text": a["text"], "message": {"content": a["text"]}, "logprobs": lp,
                    "finish_reason": a["finish_reason"]})
    return {"choices": out}


def _request(client, url: str, body: dict, stream: bool, where: str) -> list[dict]:
    import httpx

    try:
        if stream:
            with client.stream("POST", url, json={**body, "stream": True}) as resp:
                if resp.status_code != 200:
                    raise OpenAIServerError(f"{where}: HTTP {resp.status_code}: {resp.read()[:300]!r}")
                lines = list(resp.iter_lines())
            reply = _merge_stream(lines, where)
        else:
            resp = client.post(url, json=body)
            if resp.status_code != 200:
                raise OpenAIServerError(f"{where}: HTTP {resp.status_code}: {resp.text[:300]!r}")
            reply = resp.json()
    except httpx.HTTPError as exc:
        raise OpenAIServerError(f"{where}: {type(exc).__name__}: {exc}") from None
    except json.JSONDecodeError:
        raise OpenAIServerError(f"{where}: the reply is not JSON") from None
    choices = reply.get("choices") if isinstance(reply, dict) else None
    if not isinstance(choices, list) or not choices:
        raise OpenAIServerError(f"{where}: the reply has no choices")
    return choices


def _text(choice: dict, chat: bool) -> str:
    if chat:
        content = (choice.get("message") or {}).get("content")
    else:
        content = choice.get("text")
    return content if isinstance(content, str) else ""


def collect_generations_openai(
    prompts: Sequence[PromptSpec],
    *,
    model: str,
    base_url: str = LOCAL_SERVER_URL,
    endpoint: str = "chat",
    sampling: Sampling = Sampling(),
    stream: bool = False,
    timeout_s: float = 120.0,
    model_name: str | None = None,
) -> list[dict[str, Any]]:
    """Generation records from an OpenAI-compatible server: per prompt one greedy reply (temperature 0) with
    the top-K log-probabilities (K = `sampling.top_k`) and `sampling.n_samples` sampled replies (``n``, seeded)
    with their token log-probabilities. `endpoint` is "chat" (POST {base_url}/chat/completions) or "completions"
    (POST {base_url}/completions, the chat messages joined as the prompt). Raises OpenAIServerError on any
    unusable reply; records are returned only when every prompt succeeded."""
    import httpx

    if endpoint not in ("chat", "completions"):
        raise ValueError(f"endpoint must be 'chat' or 'completions', got {endpoint!r}")
    if not base_url.startswith(("http://", "https://")):
        raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
    chat = endpoint == "chat"
    n_samples, seed = sampling.n_samples, sampling.seed
    url = base_url.rstrip("/") + ("/chat/completions" if chat else "/completions")
    records = []
    with httpx.Client(timeout=timeout_s) as client:
        for p in prompts:
            msgs = build_messages(p)
            if chat:
                base = {"model": model, "messages": msgs, "max_tokens": sampling.max_tokens,
                        "logprobs": True, "top_logprobs": sampling.top_k}
            else:
                prompt = "\n\n".join(m["content"] for m in msgs) + "\n\n"
                base = {"model": model, "prompt": prompt, "max_tokens": sampling.max_tokens,
                        "logprobs": sampling.top_k}
            where = f"{url} (case {p.case_id!r}, greedy)"
            greedy = _request(client, url, {**base, "temperature": 0, "n": 1, "seed": seed}, stream, where)[0]
            g_tokens = _choice_tokens(greedy, chat, where)
            text = _text(greedy, chat)
            answers, lls = [], []
            while len(answers) < n_samples:
                where = f"{url} (case {p.case_id!r}, samples)"
                body = {**base, "temperature": sampling.temperature, "n": n_samples - len(answers),
                        "seed": seed + 1 + len(answers)}
                for c in _request(client, url, body, stream, where):
                    toks = _choice_tokens(c, chat, where)
                    if not toks:
                        raise OpenAIServerError(f"{where}: a sample has no tokens")
                    stext = _text(c, chat)
                    ends = np.cumsum([len(t) for t, _, _ in toks]).astype(int).tolist()
                    mask = _answer_mask_from_ends("".join(t for t, _, _ in toks), ends)
                    answers.append(_sample_answer(stext))
                    lls.append([min(lp, 0.0) for (_, lp, _), keep in zip(toks, mask, strict=True) if keep])
            g_ends = np.cumsum([len(t) for t, _, _ in g_tokens]).astype(int).tolist()
            g_mask = _answer_mask_from_ends("".join(t for t, _, _ in g_tokens), g_ends) if g_tokens else []
            records.append(
                {
                    **_prompt_fields(p, model_name or model),
                    "raw_output": text,
                    "answer_top_logits": [],
                    "answer_logsumexp": [],
                    "answer_mean_logit": [],
                    "vocab_size": None,
                    "sample_answers": answers[:n_samples],
                    "sample_token_logliks": lls[:n_samples],
                    "answer_top_logprobs": [t for (_, _, t), keep in zip(g_tokens, g_mask, strict=True) if keep],
                    UE_SUPPORT_FIELD: server_ue_support(),
                }
            )
    return records


def read_prompts_jsonl(path: str | Path) -> list[PromptSpec]:
    """The prompts of a JSONL file (one object a line: case_id, dataset, task_question, candidate_labels,
    reference_labels, multi_label, context); blank lines skipped; a bad line raises naming file and line."""
    prompts = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            try:
                obj = json.loads(line)
                obj["candidate_labels"], obj["reference_labels"] = (tuple(obj[k]) for k in ("candidate_labels",
                                                                                            "reference_labels"))
                prompts.append(PromptSpec(**obj))
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}: line {n}: {type(exc).__name__}: {exc}") from None
    return prompts
