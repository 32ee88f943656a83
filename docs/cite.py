"""Rewrite internal seed-document citations into citations of the published papers.

Usage: ``python docs/cite.py`` rewrites every tracked text file in place; ``--check`` only lists what it
would change and exits 1 if anything would. The mapping is the table in ``docs/references.md``.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

# Internal document number -> how the paper is cited in prose (author, year); full entries in docs/references.md.
PAPERS: dict[str, str] = {
    "000": "Hanada and Futami 2026",
    "001": "Gröger et al. 2023",
    "002": "Rethinking Correctness 2026",
}
# Built from pieces so this file does not match its own pattern.
INTERNAL = re.compile(r"\b[Ss]eed" + r" (0{2}[0-2])\b")
TEXT_SUFFIXES = {".py", ".md", ".html", ".sql", ".txt", ".toml", ".yaml", ".yml", ".cfg"}


def rewrite(text: str) -> str:
    """Every internal citation replaced by the paper's short citation."""
    return INTERNAL.sub(lambda match: PAPERS[match.group(1)], text)


def tracked_text_files(root: Path) -> list[Path]:
    listing = subprocess.run(["git", "ls-files"], cwd=root, check=True, capture_output=True, text=True)
    return [root / name for name in listing.stdout.splitlines() if Path(name).suffix in TEXT_SUFFIXES]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="list files that would change; exit 1 if any")
    args = parser.parse_args(argv)
    root = Path(__file__).resolve().parent.parent
    changed = []
    for path in tracked_text_files(root):
        if not path.exists():
            continue
        text = path.read_text(encoding="utf-8")
        new = rewrite(text)
        if new != text:
            changed.append(path.relative_to(root))
            if not args.check:
                path.write_text(new, encoding="utf-8")
    for name in changed:
        print(name)
    return 1 if (args.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
