"""Word lists and the WordPiece tokenizer of the tiny randomly initialised models the tests build (no downloads)."""

from __future__ import annotations

from pathlib import Path

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # BERT's special tokens, [PAD] = id 0
CLINICAL = ["sepsis", "admit", "discharge", "acute", "kidney", "failure", "none"]
# one transformer block of width 16: big enough to run every code path, small enough to build in a second
TINY_SIZES = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2)


def save_wordpiece_tokenizer(path: Path, words: list[str]) -> None:
    """Write ``words`` as ``vocab.txt`` (one token a line, id = line number) and save a lower-casing
    ``BertTokenizerFast`` over it into ``path``."""
    from transformers import BertTokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    (path / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    BertTokenizerFast(vocab_file=str(path / "vocab.txt"), do_lower_case=True).save_pretrained(path)
