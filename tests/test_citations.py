"""Readers and clinicians see papers cited by author and year, never the project's internal document numbers."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _cite_module():
    spec = importlib.util.spec_from_file_location("cite", ROOT / "docs" / "cite.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rewrite_maps_each_document_to_its_paper() -> None:
    cite = _cite_module()
    internal = "se" + "ed"
    assert cite.rewrite(f"({internal} 000 §4.3)") == "(Hanada and Futami 2026 §4.3)"
    assert cite.rewrite(f"{internal.title()} 001 Table 1") == "Gröger et al. 2023 Table 1"
    assert cite.rewrite(f"{internal} 002 §2.4") == "Rethinking Correctness 2026 §2.4"
    assert cite.rewrite(f"{internal} 0011 and {internal}s 000") == f"{internal} 0011 and {internal}s 000"


def test_no_internal_citation_in_any_tracked_file() -> None:
    cite = _cite_module()
    offenders = []
    for path in cite.tracked_text_files(ROOT):
        if not path.exists():
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if cite.INTERNAL.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not offenders, "internal citations (run `python docs/cite.py`):\n" + "\n".join(offenders[:40])


def test_every_paper_has_a_reference_entry() -> None:
    cite = _cite_module()
    references = (ROOT / "docs" / "references.md").read_text(encoding="utf-8")
    for short in cite.PAPERS.values():
        assert short in references, short

