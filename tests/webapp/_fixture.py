"""A small confirmation-queue snapshot + Pillow-generated images, built in the test itself (no pipeline).

Layout made under ``tmp``::

    tmp/home/exports/confirmation_queue/derm.parquet|.meta.json   (stopping_count given)
    tmp/data/derm/*.png             the dataset root (outside the home, as a path-registered dataset)
    tmp/data/derm/link_out.png  ->  tmp/data/secret.png   (a symlink out of the root; also a queue member)
    tmp/data/secret.png             must never be served
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import polars as pl
from PIL import Image, ImageDraw

DATASET = "derm"


@dataclass(frozen=True)
class Fixture:
    home: Path
    root: Path
    secret: Path
    stopping_count: int
    queue: pl.DataFrame

    def candidates(self, issue_type: str) -> list[dict]:
        return self.queue.filter(pl.col("issue_type") == issue_type).sort("position").to_dicts()

    def answers_file(self, name: str) -> Path:
        return self.home / "inbox" / "confirmations" / f"{name}.jsonl"

    def records(self, name: str) -> list[dict]:
        p = self.answers_file(name)
        return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []


_CACHE: dict[tuple[str, int], bytes] = {}


def _png(im: Image.Image) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def _lesion(path: Path, seed: int) -> None:
    if ("lesion", seed) not in _CACHE:
        _CACHE["lesion", seed] = _png(_make_lesion(seed))
    path.write_bytes(_CACHE["lesion", seed])


def _make_lesion(seed: int, size: tuple[int, int] = (480, 360)) -> Image.Image:
    """A skin-toned background with a darker irregular blob: looks like a dermoscopy crop in screenshots."""
    rng = np.random.default_rng(seed)
    w, h = size
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.array([224, 180, 150], float) + rng.normal(0, 6, 3)
    img = np.clip(base + rng.normal(0, 4, (h, w, 3)) - 0.04 * (yy[..., None] - h / 2), 0, 255)
    cx, cy = w / 2 + rng.normal(0, 30), h / 2 + rng.normal(0, 20)
    ang = np.arctan2(yy - cy, xx - cx)
    rad = 70 + 25 * rng.random() + 10 * np.sin(3 * ang + rng.random() * 6)
    inside = np.hypot(xx - cx, (yy - cy) * 1.2) < rad
    color = np.array([110, 70, 50], float) + rng.normal(0, 15, 3)
    img[inside] = 0.25 * img[inside] + 0.75 * color
    return Image.fromarray(img.astype(np.uint8))


def _irrelevant(path: Path) -> None:
    """Something that is not a skin image (a chart with text)."""
    im = Image.new("RGB", (480, 360), (245, 245, 250))
    d = ImageDraw.Draw(im)
    for i, hgt in enumerate([120, 200, 80, 260, 160]):
        d.rectangle([40 + i * 80, 320 - hgt, 90 + i * 80, 320], fill=(60, 110, 200))
    d.text((40, 20), "QUARTERLY REPORT", fill=(20, 20, 20))
    path.write_bytes(_png(im))


def build(tmp: Path, stopping_count: int = 3, n_extra: int = 0) -> Fixture:
    """Make the fixture under ``tmp``; ``n_extra`` appends that many irrelevant candidates whose image files
    do not exist (a large queue that must still open instantly)."""
    home, root = tmp / "home", tmp / "data" / DATASET
    root.mkdir(parents=True)
    (root / "sub").mkdir()
    secret = tmp / "data" / "secret.png"
    Image.new("RGB", (8, 8), (255, 0, 0)).save(secret)
    names = [f"img_{i:02d}.png" for i in range(10)]
    for i, n in enumerate(names):
        _lesion(root / n, seed=i)
    _irrelevant(root / "chart.png")
    _lesion(root / "sub" / "nested.png", seed=99)
    (root / "not_an_image.png").write_bytes(b"this is not a png")
    (root / "link_out.png").symlink_to(secret)
    # a near duplicate: a shifted, slightly brighter copy of img_03
    src = Image.open(root / "img_03.png")
    copy = Image.eval(src.transform(src.size, Image.Transform.AFFINE, (1, 0, 12, 0, 1, 6)),
                      lambda v: min(255, v + 8))
    (root / "img_03_copy.png").write_bytes(_png(copy))

    labels = {n: ("melanoma" if i % 3 == 0 else "nevus") for i, n in enumerate(names)}
    labels |= {"chart.png": "nevus", "sub/nested.png": "nevus", "img_03_copy.png": labels["img_03.png"]}
    (root / "labels.csv").write_text("file_name,label\n" + "".join(f"{k},{v}\n" for k, v in labels.items()))

    rows = []
    irr = ["chart.png", "img_00.png", "img_01.png", "sub/nested.png", "img_02.png", "img_04.png",
           "not_an_image.png", "link_out.png"]
    rows += [("irrelevant", p, n, None, None) for p, n in enumerate(irr)]
    rows += [("irrelevant", len(irr) + k, f"missing_{k:05d}.png", None, None) for k in range(n_extra)]
    pairs = [("img_03.png", "img_03_copy.png"), ("img_05.png", "img_06.png"), ("img_07.png", "img_08.png"),
             ("img_00.png", "img_09.png")]
    rows += [("near_duplicate", p, a, b, None) for p, (a, b) in enumerate(pairs)]
    labs = [("img_05.png", "melanoma"), ("img_06.png", "nevus"), ("img_07.png", "nevus"),
            ("img_08.png", "melanoma"), ("img_09.png", "seborrheic keratosis")]
    rows += [("label_error", p, a, None, lab) for p, (a, lab) in enumerate(labs)]
    queue = pl.DataFrame(
        {
            "dataset": [DATASET] * len(rows),
            "issue_type": [r[0] for r in rows],
            "position": [r[1] for r in rows],
            "item_id": [r[2] for r in rows],
            "item_id_2": [r[3] for r in rows],
            "label": [r[4] for r in rows],
        },
        schema={"dataset": pl.Utf8, "issue_type": pl.Utf8, "position": pl.Int64, "item_id": pl.Utf8,
                "item_id_2": pl.Utf8, "label": pl.Utf8},
    )
    qdir = home / "exports" / "confirmation_queue"
    qdir.mkdir(parents=True)
    queue.write_parquet(qdir / f"{DATASET}.parquet")
    meta = {
        "dataset": DATASET, "dataset_root": str(root), "stopping_count": stopping_count, "p_chance": 0.05,
        "p_plus": 0.05, "created": "2026-11-30T05:00:00+00:00",
        "queue_version": hashlib.sha256((qdir / f"{DATASET}.parquet").read_bytes()).hexdigest(),
    }
    (qdir / f"{DATASET}.meta.json").write_text(json.dumps(meta))
    return Fixture(home, root, secret, stopping_count, queue)


CSRF_RE = re.compile(r'name="csrf" value="([0-9a-f]{64})"')
POSITION_RE = re.compile(r'name="position" value="(\d+)"')
UNDO_RE = re.compile(r'name="undoes" value="([0-9a-f]{32})"')


def form_fields(html: str) -> dict[str, str]:
    """The hidden fields of the question page's answer form (csrf, position, item_id, item_id_2)."""
    out = {"csrf": CSRF_RE.search(html).group(1)}
    for name in ("position", "item_id", "item_id_2"):
        m = re.search(rf'name="{name}" value="([^"]*)"', html)
        if m:
            out[name] = m.group(1).replace("&#39;", "'").replace("&amp;", "&")
    return out


# ---------------------------------------------------------------- a real server process
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(home: Path, port: int) -> subprocess.Popen:
    """``python -m noisycal_platform.confirm_app`` (uvicorn) on 127.0.0.1:port; returns once it answers."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "noisycal_platform.confirm_app", "--home", str(home), "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited: {proc.stdout.read().decode(errors='replace')}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/", timeout=1).status_code == 401:
                return proc
        except httpx.TransportError:
            time.sleep(0.1)
    stop_server(proc)
    raise AssertionError("server did not start within 60 s")


def stop_server(proc: subprocess.Popen) -> None:
    """SIGKILL this one process (started by the test) and reap it."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    if proc.stdout:
        proc.stdout.close()
