"""Input table contracts: the columns, types and ranges every reader and every asset check enforces.

One contract per user-supplied table. ``io.py`` applies them to files (errors name file, 1-based data row and
column); ``assets/checks.py`` turns the same contracts into Great Expectations suites run as blocking checks.
"""

from __future__ import annotations

import numbers
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

__all__ = [
    "ANNOTATIONS",
    "ANSWERS",
    "ANSWER_ROLES",
    "BINARY_CLASSES",
    "CLASS_PREFIX",
    "CONFIRMATION_FIELDS",
    "CONTRACTS",
    "ISSUE_TYPES",
    "ITEMS",
    "MAX_ID_LENGTH",
    "PREDICTIONS",
    "PROB_SUM_TOL",
    "REFERENCE_LABELS",
    "STORED_ANNOTATIONS",
    "ColumnSpec",
    "Problem",
    "TableContract",
    "annotation_contract",
    "class_columns",
    "confirmation_log_problems",
    "confirmation_problem",
    "id_problem",
    "parse_utc_timestamp",
    "validate_frame",
]

Kind = Literal["id", "binary", "class_label", "unit_float", "timestamp"]


@dataclass(frozen=True)
class ColumnSpec:
    """One column: ``id`` = non-empty string; ``binary`` = integer 0 or 1; ``class_label`` = one of ``values``
    (the declared class names, compared as text); ``unit_float`` = finite float in [0, 1]; ``timestamp`` =
    ISO-8601 date-time (stored as UTC)."""

    name: str
    kind: Kind
    required: bool = True
    description: str = ""
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class TableContract:
    name: str
    columns: tuple[ColumnSpec, ...]
    unique_key: tuple[str, ...] = field(default=())

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns if c.required)

    @property
    def optional(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns if not c.required)

    def column(self, name: str) -> ColumnSpec:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)


ANNOTATIONS = TableContract(
    name="annotations",
    columns=(
        ColumnSpec("item_id", "id", description="the item the annotator labelled"),
        ColumnSpec("annotator_id", "id", description="who labelled it"),
        ColumnSpec("label", "binary", description="the annotator's label, 0 or 1"),
        ColumnSpec("timestamp", "timestamp", required=False, description="when it was labelled"),
    ),
    unique_key=("item_id", "annotator_id"),
)


def _keyed_by(name: str, key: ColumnSpec, *columns: ColumnSpec) -> TableContract:
    """A table with one row per ``key`` value: the key column first, then ``columns``."""
    return TableContract(name=name, columns=(key, *columns), unique_key=(key.name,))


PREDICTIONS = _keyed_by(
    "predictions",
    ColumnSpec("item_id", "id", description="the scored item"),
    ColumnSpec("score", "unit_float", description="the model's probability of class 1"),
)
REFERENCE_LABELS = _keyed_by(
    "reference_labels",
    ColumnSpec("item_id", "id", description="the item"),
    ColumnSpec("label", "binary", description="clean reference label, 0 or 1"),
)

CONTRACTS = {c.name: c for c in (ANNOTATIONS, PREDICTIONS, REFERENCE_LABELS)}

# ------------------------------------------------------------------------------------------ several classes
#: The labels of a binary model. Annotation labels are stored twice in ``raw.annotations``: ``label_text``, the
#: label as written (the text a class set is matched against), and ``label``, Int8 0/1 when the text is "0" or
#: "1" and null otherwise (what the binary calibration path and the SQL models read, as before).
BINARY_CLASSES = ("0", "1")
#: A multi-class predictions file has one probability column ``p_<class>`` per class instead of ``score``.
CLASS_PREFIX = "p_"
PROB_SUM_TOL = 1e-6  # the per-row tolerance on Σ_c p_c = 1

#: ``items.csv`` (``models/<version>/`` or the home): ``item_id`` plus any metadata columns (site, sex, ...),
#: each a subgroup variable; every other column is kept as text.
ITEMS = _keyed_by("items", ColumnSpec("item_id", "id", description="the item described"))

#: ``raw.annotations`` as stored (what the blocking check runs): ``label`` may be null where ``label_text`` is a
#: class name other than 0/1.
STORED_ANNOTATIONS = TableContract(
    name="annotations",
    columns=(
        ANNOTATIONS.columns[0],
        ANNOTATIONS.columns[1],
        ColumnSpec("label", "binary", required=False, description="label_text as 0/1 when it is 0 or 1"),
        ColumnSpec("label_text", "id", description="the annotator's label as written"),
        ANNOTATIONS.columns[3],
    ),
    unique_key=ANNOTATIONS.unique_key,
)


def annotation_contract(classes: tuple[str, ...] | None = None) -> TableContract:
    """The annotation file contract: labels 0/1 (``classes`` None, the binary contract) or one of ``classes``
    ∪ {0, 1} (labels of binary models stay valid beside multi-class ones)."""
    if not classes:
        return ANNOTATIONS
    values = tuple(dict.fromkeys((*BINARY_CLASSES, *classes)))
    label = ColumnSpec("label", "class_label", description="the annotator's label: a declared class", values=values)
    return TableContract(ANNOTATIONS.name, (*ANNOTATIONS.columns[:2], label, ANNOTATIONS.columns[3]),
                         ANNOTATIONS.unique_key)


def class_columns(columns: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The class names of the ``p_<class>`` columns of a predictions header, in header order."""
    return tuple(c[len(CLASS_PREFIX):] for c in columns if c.startswith(CLASS_PREFIX) and len(c) > len(CLASS_PREFIX))

# ------------------------------------------------------------------------------------------------ ids
MAX_ID_LENGTH = 256  # an id (item, annotator, answer, dataset) longer than this is a corrupt record


def id_problem(value: object) -> str | None:
    """Why ``value`` cannot be an id, or None: a non-empty string of at most ``MAX_ID_LENGTH`` characters
    with no control or format character (Unicode categories Cc, Cf: NUL, newlines, bidi overrides)."""
    if not isinstance(value, str) or not value:
        return "must be a non-empty string"
    if len(value) > MAX_ID_LENGTH:
        return f"is longer than {MAX_ID_LENGTH} characters ({len(value)})"
    if any(unicodedata.category(c) in ("Cc", "Cf") for c in value):
        return "contains control characters"
    return None


# ------------------------------------------------------------------------------ confirmation answers
# One confirmation answer, as the confirmation tool writes it (one JSON object per line of
# ``inbox/confirmations/<annotator>.jsonl``) and as the cleaning protocol reads it (Gröger et al. 2023 §3.3-3.4).
ISSUE_TYPES = ("irrelevant", "near_duplicate", "label_error")
ANSWERS = ("yes", "no", "undo")
#: who answers; the tool's "admin" logins (``confirm_app.annotators.LOGIN_ROLES``) never write answers
ANSWER_ROLES = ("expert", "lay")
CONFIRMATION_FIELDS: dict[str, str] = {
    "answer_id": "unique id of this record (the tool writes 32 hex digits)",
    "dataset": "the dataset whose queue was answered",
    "issue_type": f"one of {ISSUE_TYPES}",
    "item_id": "the candidate file",
    "item_id_2": "the second file of a near-duplicate pair; null for the other issue types",
    "annotator_id": "who answered",
    "role": f"one of {ANSWER_ROLES}",
    "answer": f"one of {ANSWERS}",
    "undoes": "the answer_id an undo cancels; null unless answer is 'undo'",
    "position": "the candidate's 0-based rank in the queue",
    "timestamp": "ISO-8601 date-time with a UTC offset",
}


@dataclass(frozen=True)
class Problem:
    """Why a record is invalid: the field and the reason. Never quotes the offending value."""

    field: str
    reason: str

    def __str__(self) -> str:
        return f"field '{self.field}': {self.reason}"


def parse_utc_timestamp(value: object) -> datetime | None:
    """An ISO-8601 date-time string carrying a UTC offset, converted to UTC; None if it is not one."""
    if isinstance(value, datetime):
        ts = value
    elif isinstance(value, str) and len(value) <= 64:
        try:
            ts = datetime.fromisoformat(value)
        except ValueError:
            return None
    else:
        return None
    return None if ts.tzinfo is None else ts.astimezone(UTC)


def confirmation_problem(rec: object) -> Problem | None:
    """Validate one confirmation record against the contract above; None when valid.

    Checks: a JSON object; every id field an id (:func:`id_problem`); ``issue_type``, ``role`` and
    ``answer`` from their sets; ``item_id_2`` a second, different id exactly for ``near_duplicate``;
    ``undoes`` an id exactly when ``answer`` is "undo"; ``position`` an integer >= 0; ``timestamp`` an
    ISO-8601 date-time with a UTC offset. Cross-record rules (a repeated ``answer_id``, an undo naming an
    unknown answer) are checked by the readers that see every record.
    """
    if not isinstance(rec, Mapping):
        return Problem("<record>", "not a JSON object")
    for f in ("answer_id", "dataset", "item_id", "annotator_id"):
        why = id_problem(rec.get(f))
        if why:
            return Problem(f, why)
    for f, allowed in (("issue_type", ISSUE_TYPES), ("role", ANSWER_ROLES), ("answer", ANSWERS)):
        if rec.get(f) not in allowed:
            return Problem(f, f"must be one of {list(allowed)}")
    b = rec.get("item_id_2")
    if rec["issue_type"] == "near_duplicate":
        why = id_problem(b)
        if why:
            return Problem("item_id_2", f"a near_duplicate answer needs the pair's second item: {why}")
        if b == rec["item_id"]:
            return Problem("item_id_2", "a near_duplicate pair needs two different items")
    elif b is not None:
        return Problem("item_id_2", f"must be null for issue_type {rec['issue_type']}")
    undoes = rec.get("undoes")
    if rec["answer"] == "undo":
        why = id_problem(undoes)
        if why:
            return Problem("undoes", f"an undo must name the answer it cancels: {why}")
    elif undoes is not None:
        return Problem("undoes", "must be null unless answer is 'undo'")
    pos = rec.get("position")
    if isinstance(pos, bool) or not isinstance(pos, numbers.Integral) or not 0 <= pos < 2**53:
        return Problem("position", "must be an integer >= 0")
    if parse_utc_timestamp(rec.get("timestamp")) is None:
        return Problem("timestamp", "must be an ISO-8601 date-time with a UTC offset (e.g. ...+00:00)")
    return None


def validate_frame(frame, contract: TableContract) -> dict:
    """Run ``contract`` as a Great Expectations suite over a polars frame (GE has no polars source: pandas).

    Returns ``{"success": bool, "failed": [{"expectation", "column", "unexpected_count", "examples"}],
    "evaluated": int}``. GE is imported here, not at module import (it costs ~3 s per process).
    """
    import great_expectations as gx
    import great_expectations.expectations as gxe
    from great_expectations.data_context.types.base import ProgressBarsConfig

    expectations = []
    for spec in contract.columns:
        if spec.name not in frame.columns:
            if spec.required:
                expectations.append(gxe.ExpectColumnToExist(column=spec.name))
            continue
        if spec.required:
            expectations.append(gxe.ExpectColumnValuesToNotBeNull(column=spec.name))
        if spec.kind == "binary":
            expectations.append(gxe.ExpectColumnValuesToBeInSet(column=spec.name, value_set=[0, 1]))
        elif spec.kind == "unit_float":
            expectations.append(gxe.ExpectColumnValuesToBeBetween(column=spec.name, min_value=0.0, max_value=1.0))
        elif spec.kind == "id":
            expectations.append(gxe.ExpectColumnValueLengthsToBeBetween(column=spec.name, min_value=1))
    if len(contract.unique_key) == 1:
        expectations.append(gxe.ExpectColumnValuesToBeUnique(column=contract.unique_key[0]))
    elif contract.unique_key:
        expectations.append(gxe.ExpectCompoundColumnsToBeUnique(column_list=list(contract.unique_key)))

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)  # no tqdm bars on stderr per validation
    batch_def = (
        context.data_sources.add_pandas(name=f"{contract.name}_source")
        .add_dataframe_asset(name=contract.name)
        .add_batch_definition_whole_dataframe("whole")
    )
    suite = context.suites.add(gx.ExpectationSuite(name=f"{contract.name}_contract", expectations=expectations))
    result = batch_def.get_batch(batch_parameters={"dataframe": frame.to_pandas()}).validate(suite)
    failed = []
    for r in result.results:
        if not r.success:
            cfg = r.expectation_config
            failed.append(
                {
                    "expectation": cfg.type,
                    "column": cfg.kwargs.get("column") or cfg.kwargs.get("column_list"),
                    "unexpected_count": (r.result or {}).get("unexpected_count"),
                    "examples": [str(v) for v in ((r.result or {}).get("partial_unexpected_list") or [])[:5]],
                }
            )
    return {"success": bool(result.success), "failed": failed, "evaluated": len(result.results)}


def confirmation_log_problems(records: list[Mapping]) -> dict[int, Problem]:
    """Index -> problem for records valid one by one (:func:`confirmation_problem`) but not together.

    An ``answer_id`` seen again with different content rejects the later copy (identical copies are the
    same answer, counted once); an undo is rejected when the answer it names is absent, rejected itself,
    or another annotator's (an undo may name an undo: it restores what that one cancelled).
    """

    def content(r: Mapping) -> tuple:
        a, b = r["item_id"], r.get("item_id_2")
        pair = (a, b) if b is None else (min(a, b), max(a, b))
        return (*(r.get(k) for k in CONFIRMATION_FIELDS if k not in ("item_id", "item_id_2")), pair)

    bad: dict[int, Problem] = {}
    first: dict[str, int] = {}
    for i, r in enumerate(records):
        j = first.setdefault(r["answer_id"], i)
        if j != i and content(records[j]) != content(r):
            bad[i] = Problem("answer_id", f"repeated with different content (first used by record {j + 1})")
    undos = [i for i, r in enumerate(records) if r["answer"] == "undo" and i not in bad]
    changed = True
    while changed:  # an undo of a rejected undo is rejected too: iterate to the fixed point
        changed = False
        for i in undos:
            if i in bad:
                continue
            j = first.get(records[i]["undoes"])
            if j is None or j in bad:
                bad[i] = Problem("undoes", "names an answer that is not in the log (or was rejected)")
                changed = True
            elif records[j]["annotator_id"] != records[i]["annotator_id"]:
                bad[i] = Problem("undoes", "names another annotator's answer")
                changed = True
    return bad


# ------------------------------------------------------------------------------------------ cleaning scores
#: A model's scores on an image dataset, for the cleaning-impact analysis (Gröger et al. 2023 §4.3):
#: ``models/<version>/cleaning/<dataset>.csv``, one row per image (``file_name`` as in the dataset).
CLEANING_SCORES = _keyed_by(
    "cleaning_scores",
    ColumnSpec("file_name", "id", description="the image, as named in the dataset"),
    ColumnSpec("score", "unit_float", description="the model's probability of the positive class"),
    ColumnSpec("target", "binary", description="the image's class for this model, 0 or 1"),
)
