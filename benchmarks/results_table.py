"""The one benchmark table (issue 22): rows, goals, the machine stamp, the markdown table and the README block.

Every ``bench_*.py`` that takes part in ``make bench`` builds its rows with :func:`row` and writes them with
:func:`write_rows` when given ``--rows-json PATH``; ``run_all.py`` stamps them (machine, date, commit) and writes
``benchmarks/results/<YYYY-MM-DD>.json``; ``render_readme.py`` turns the newest file into README.md's block
between :data:`BEGIN` and :data:`END`. A goal is judged here only (:func:`goal_met`), always from the stored
numbers, never from a stored verdict. Imports only the standard library.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BEGIN = "<!-- bench:begin -->"
END = "<!-- bench:end -->"
RATIO_OF = ("peer/ours", "ours/peer")
OPS = {">=": "≥", "<=": "≤", "<": "<", ">": ">"}
COLUMNS = ("what", "ours", "peer", "ratio", "goal", "machine", "date")


def row(
    bench: str,
    what: str,
    ours: float,
    unit: str,
    *,
    peer: str | None = None,
    peer_value: float | None = None,
    ratio_of: str = "peer/ours",
    goal: tuple[str, str, float] | None = None,
    note: str = "",
    quick: bool = False,
) -> dict[str, Any]:
    """One measured row. ``goal`` is ``(on, op, value)``: ``on`` is ``"ratio"`` or ``"ours"``, ``op`` one of
    :data:`OPS`. The ratio is ``peer_value / ours`` (a speed-up when the values are times) or, with
    ``ratio_of="ours/peer"``, ``ours / peer_value`` (a multiple of a floor)."""
    if ratio_of not in RATIO_OF:
        raise ValueError(f"ratio_of must be one of {RATIO_OF}, got {ratio_of!r}")
    if goal is not None and (goal[0] not in ("ratio", "ours") or goal[1] not in OPS):
        raise ValueError(f"goal must be (ratio|ours, {'|'.join(OPS)}, value), got {goal!r}")
    ratio = None
    if peer_value is not None and ours is not None:
        num, den = (peer_value, ours) if ratio_of == "peer/ours" else (ours, peer_value)
        ratio = num / den if den else math.inf
    out = {
        "bench": bench,
        "what": what + (" [quick]" if quick else ""),
        "status": "measured",
        "ours": None if ours is None else float(ours),
        "unit": unit,
        "peer": peer,
        "peer_value": None if peer_value is None else float(peer_value),
        "ratio": ratio,
        "ratio_of": ratio_of,
        "goal": None if goal is None else {"on": goal[0], "op": goal[1], "value": float(goal[2])},
        "note": note,
        "quick": quick,
    }
    out["met"] = goal_met(out)
    return out


def placeholder(bench: str, what: str, status: str, goal_text: str = "", note: str = "") -> dict[str, Any]:
    """A row for a comparison that has no figure in this run: ``status`` is ``"not run"`` or ``"failed"``."""
    return {"bench": bench, "what": what, "status": status, "ours": None, "unit": "", "peer": None,
            "peer_value": None, "ratio": None, "ratio_of": "peer/ours", "goal": None, "goal_text": goal_text,
            "note": note, "quick": False, "met": None}


def goal_met(r: dict[str, Any]) -> bool | None:
    """Whether the row's number reaches its goal; ``None`` without a goal or without the number."""
    g = r.get("goal")
    if r.get("status", "measured") != "measured" or not g:
        return None
    value = r["ratio"] if g["on"] == "ratio" else r["ours"]
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    op, target = g["op"], g["value"]
    return {">=": value >= target, "<=": value <= target, "<": value < target, ">": value > target}[op]


def fmt(value: float | None, unit: str = "") -> str:
    """A number for the table: 3 significant figures, thousands separated, small values in e-notation."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if math.isinf(value):
        return "∞"
    a = abs(value)
    if a == 0:
        s = "0"
    elif a >= 100:
        s = f"{value:,.0f}"
    elif a >= 10:
        s = f"{value:.1f}"
    elif a >= 1:
        s = f"{value:.2f}"
    elif a >= 1e-3:
        s = f"{value:#.3g}"
    else:
        s = f"{value:.1e}"
    return f"{s} {unit}".strip() if unit and unit != "×" else s + unit


def _target(v: float) -> str:
    return f"{int(v):,}" if float(v).is_integer() else f"{v:g}"


def goal_text(r: dict[str, Any]) -> str:
    g = r.get("goal")
    if not g:
        return r.get("goal_text") or "—"
    if g["on"] == "ratio":
        return f"{r['ratio_of']} {OPS[g['op']]} {_target(g['value'])}×"
    return f"{OPS[g['op']]} {_target(g['value'])}{' ' + r['unit'] if r['unit'] else ''}"


def cells(r: dict[str, Any]) -> dict[str, str]:
    """The table's cells of one row (:data:`COLUMNS`)."""
    status = r.get("status", "measured")
    machine = r.get("machine") or {}
    mach = f"{machine.get('model', '?')}, {machine.get('cores', '?')} cores" if machine else "—"
    date = (r.get("measured_at") or "")[:10] or "—"
    if status != "measured":
        return {"what": r["what"], "ours": status, "peer": r.get("peer") or "—", "ratio": "—",
                "goal": f"{goal_text(r)}: {status}" if goal_text(r) != "—" else "—",
                "machine": mach if status == "failed" else "—", "date": date if status == "failed" else "—"}
    met = goal_met(r)
    verdict = "" if met is None else (": met" if met else ": **not met**")
    peer = "—"
    if r.get("peer"):
        peer = r["peer"] if r.get("peer_value") is None else f"{r['peer']}: {fmt(r['peer_value'], r['unit'])}"
    return {"what": r["what"], "ours": fmt(r["ours"], r["unit"]), "peer": peer,
            "ratio": fmt(r["ratio"], "×") if r.get("ratio") is not None else "—",
            "goal": goal_text(r) + verdict, "machine": mach, "date": date}


def _escape(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        c = cells(r)
        lines.append("| " + " | ".join(_escape(c[k]) for k in COLUMNS) + " |")
    return "\n".join(lines)


def text_table(rows: list[dict[str, Any]]) -> str:
    """The same table in fixed-width columns, for the terminal."""
    table = [dict(zip(COLUMNS, COLUMNS, strict=True))] + [cells(r) for r in rows]
    table = [{k: v.replace("**", "") for k, v in c.items()} for c in table]
    width = {k: max(len(c[k]) for c in table) for k in COLUMNS}
    out = ["  ".join(c[k].ljust(width[k]) for k in COLUMNS).rstrip() for c in table]
    out.insert(1, "  ".join("-" * width[k] for k in COLUMNS))
    return "\n".join(out)


def replace_block(text: str, block: str) -> str:
    """``text`` with everything between :data:`BEGIN` and :data:`END` replaced by ``block`` (markers kept)."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ValueError(f"README must hold exactly one {BEGIN} … {END} block, in that order")
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n{block.strip()}\n{END}{tail}"


# --------------------------------------------------------------------------- the bench side
def add_rows_arg(parser: Any) -> None:
    parser.add_argument("--rows-json", type=Path, default=None,
                        help="also write the comparison rows (results_table.row) to this JSON file")


def write_rows(path: Path | None, rows: list[dict[str, Any]]) -> None:
    if path is None:
        return
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(rows, indent=1, allow_nan=True))
    os.replace(tmp, path)


# --------------------------------------------------------------------------- the machine stamp
def machine() -> dict[str, Any]:
    """``lscpu``'s model name, the CPU count and the host's kernel, as the results file records them."""
    model = platform.processor() or platform.machine()
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False, timeout=10).stdout
        for line in out.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Model name":
                model = value.strip()
                break
    except (OSError, subprocess.SubprocessError):
        pass
    return {"model": model, "cores": os.cpu_count(), "system": f"{platform.system()} {platform.release()}",
            "python": platform.python_version()}


def commit(repo: Path) -> str:
    """HEAD's hash, with ``+dirty`` when tracked files differ from it."""
    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=repo, capture_output=True, text=True, check=False).stdout.strip()

    head = git("rev-parse", "HEAD") or "unknown"
    return head + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
