"""Word lists and the WordPiece tokenizer of the tiny randomly initialised models the tests build (no downloads)."""

from __future__ import annotations

from pathlib import Path

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # BERT's special tokens, [PAD] = id 0
CLINICAL = ["sepsis", "admit", "discharge", "acute", "kidney", "failure", "none"]


def save_wordpiece_tokenizer(path: Path, words: list[str]) -> None:
    """Write ``words`` as ``vocab.txt`` (one token a line, id = line number) and save a lower-casing
    ``BertTokenizerFast`` over it into ``path``."""
    from transformers import BertTokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    (path / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    BertTokenizerFast(vocab_file=str(path / "vocab.txt"), do_lower_case=True).save_pretrained(path)
