"""Produce generation records (io.GENERATION_FIELDS) from a local Hugging Face causal LM (issue 5 §1).

For each prompt: a greedy answer with, per answer token, the top-K raw logits, logsumexp and mean over the
full
logits dimension and V (enough for Self-Certainty and LogTokU exactly, ue_anchors.md §1.5), plus N sampled
answers
with the log-likelihood of each sampled answer token. "Answer tokens" are the tokens overlapping the JSON
"answer" value; if the output does not parse, all generated tokens are used. torch/transformers are imported
inside (optional `llm` extra); nothing is downloaded (local_files_only).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from noisycal_platform.correctness.labels import parse_model_output

__all__ = ["PromptSpec", "build_messages", "collect_generations", "load_causal_lm", "write_generations_jsonl"]


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


def collect_generations(
    model_dir: str | Path,
    prompts: Sequence[PromptSpec],
    *,
    model_name: str | None = None,
    n_samples: int = 10,
    temperature: float = 1.0,
    max_new_tokens: int = 96,
    top_k_logits: int = 20,
    seed: int = 0,
    gguf_file: str | None = None,
    device: str = "cpu",
    loaded: tuple[Any, Any] | None = None,
) -> list[dict[str, Any]]:
    """Greedy answer + `n_samples` samples per prompt, recorded exactly as io.GENERATION_FIELDS (one dict
    each)."""
    if n_samples < 1 or max_new_tokens < 1 or top_k_logits < 2 or temperature <= 0:
        raise ValueError(
            f"need n_samples >= 1, max_new_tokens >= 1, top_k_logits >= 2, temperature > 0; got "
            f"{n_samples}, {max_new_tokens}, {top_k_logits}, {temperature}"
        )
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
    gen = torch.Generator(device="cpu").manual_seed(seed)
    records = []
    for p in prompts:
        enc = {k: v.to(device) for k, v in _prompt_ids(tok, p).items()}
        n_in = enc["input_ids"].shape[1]
        with torch.inference_mode():
            out = model.generate(
                **enc,
                do_sample=False,
                max_new_tokens=max_new_tokens,
                output_logits=True,
                return_dict_in_generate=True,
                pad_token_id=pad,
                temperature=None,
                top_p=None,
                top_k=None,
            )
        ids = _trim(out.sequences[0, n_in:].tolist(), eos)
        text, mask = _answer_token_mask(tok, ids)
        top, lse, mean = [], [], []
        for t, keep in enumerate(mask):
            if not keep:
                continue
            z = out.logits[t][0].double()
            top.append(torch.topk(z, top_k_logits).values.tolist())
            lse.append(float(torch.logsumexp(z, 0)))
            mean.append(float(z.mean()))
        vocab = int(out.logits[0].shape[-1]) if out.logits else int(model.config.vocab_size)
        answers, lls = [], []
        for _ in range(n_samples):
            torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))
            with torch.inference_mode():
                s = model.generate(
                    **enc,
                    do_sample=True,
                    temperature=temperature,
                    top_k=0,
                    top_p=1.0,
                    max_new_tokens=max_new_tokens,
                    output_logits=True,
                    return_dict_in_generate=True,
                    pad_token_id=pad,
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
            parsed = parse_model_output(stext)
            answers.append(parsed.answer if parsed.answer is not None else stext)
            lls.append([min(x, 0.0) for x in logp])
        records.append(
            {
                "case_id": p.case_id,
                "dataset": p.dataset,
                "model": name,
                "task_question": p.task_question,
                "candidate_labels": list(p.candidate_labels),
                "reference_labels": list(p.reference_labels),
                "multi_label": p.multi_label,
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
    """Write records as JSONL (one object per line, UTF-8)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    return path
