"""No unsafe deserialisation or dynamic code in runtime code, checked statically on the source (AST): every
``torch.load`` passes ``weights_only=True``; no ``pickle``/``marshal`` loads, no ``yaml.load`` without a safe
loader, no ``numpy.load(allow_pickle=True)``, no ``eval``/``exec``."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUNTIME = ("noisycal_platform", "assets", "resources", "orchestration")


def _sources() -> list[Path]:
    files = [p for d in RUNTIME for p in sorted((REPO / d).rglob("*.py"))]
    return [*files, REPO / "definitions.py"]


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _keyword(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _is_true(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def unsafe_calls(tree: ast.AST) -> list[str]:
    """Each offending call as ``line: reason``."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        last = name.rsplit(".", 1)[-1]
        if name in ("eval", "exec", "builtins.eval", "builtins.exec"):
            found.append(f"{node.lineno}: {name}()")
        elif name.split(".")[0] in ("pickle", "cPickle", "dill", "marshal", "joblib") and last in ("load", "loads"):
            found.append(f"{node.lineno}: {name}()")
        elif name.endswith("torch.load") or name == "torch.load":
            if not _is_true(_keyword(node, "weights_only")):
                found.append(f"{node.lineno}: torch.load without weights_only=True")
        elif name in ("yaml.load", "yaml.load_all"):
            loader = _dotted(_keyword(node, "Loader") or (node.args[1] if len(node.args) > 1 else ast.Constant(None)))
            if not loader.endswith(("SafeLoader", "CSafeLoader")):
                found.append(f"{node.lineno}: {name} without SafeLoader")
        elif name in ("yaml.unsafe_load", "yaml.full_load"):
            found.append(f"{node.lineno}: {name}")
        elif name in ("np.load", "numpy.load") and _is_true(_keyword(node, "allow_pickle")):
            found.append(f"{node.lineno}: {name}(allow_pickle=True)")
    return found


def test_the_scan_finds_each_unsafe_form():
    bad = (
        "import pickle, torch, yaml, numpy as np\n"
        "pickle.loads(b'')\n"
        "torch.load('w.pt')\n"
        "torch.load('w.pt', weights_only=False)\n"
        "yaml.load(text)\n"
        "np.load('a.npy', allow_pickle=True)\n"
        "eval('1')\n"
        "exec('x = 1')\n"
        "torch.load('w.pt', weights_only=True)\n"
        "yaml.load(text, Loader=yaml.SafeLoader)\n"
    )
    assert [f.split(":")[0] for f in unsafe_calls(ast.parse(bad))] == ["2", "3", "4", "5", "6", "7", "8"]


def test_runtime_code_has_no_unsafe_load_or_dynamic_code():
    offenders = {
        str(p.relative_to(REPO)): unsafe_calls(ast.parse(p.read_text(encoding="utf-8")))
        for p in _sources()
    }
    assert {k: v for k, v in offenders.items() if v} == {}
    assert any(p.name == "_dino.py" for p in _sources())  # the one torch.load site is in the scanned set


def test_the_encoder_loads_its_weights_with_weights_only():
    tree = ast.parse((REPO / "noisycal_platform/cleaning/encoder/_dino.py").read_text(encoding="utf-8"))
    loads = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _dotted(n.func).endswith("torch.load")]
    assert loads and all(_is_true(_keyword(n, "weights_only")) for n in loads)
