"""fastdup as a benchmark peer (run with the python of a separate venv that has fastdup; never imported by the
platform): its default ``fd.run()`` on a list of image files, then every similar pair it reports.

    SENTRY_OPT_OUT=1 /work/fastdup-venv/bin/python benchmarks/bench_ham10000_fastdup.py \
        --files files.txt --work-dir /tmp/fd --out pairs.csv --threads 2

Writes ``pairs.csv`` (columns ``a``, ``b``, ``similarity``: 0-based rows of ``--files``) and prints one JSON line
with the version and the seconds of ``fd.run()``. Imports only fastdup, pandas and the standard library.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=Path, required=True, help="text file, one absolute image path per line")
    ap.add_argument("--work-dir", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    os.environ.setdefault("SENTRY_OPT_OUT", "1")
    import fastdup

    files = args.files.read_text().split("\n")
    files = [f for f in files if f]
    row = {os.path.realpath(f): i for i, f in enumerate(files)}
    t = time.perf_counter()
    fd = fastdup.create(work_dir=str(args.work_dir), input_dir=files)
    fd.run(num_threads=args.threads, overwrite=True)
    seconds = time.perf_counter() - t
    sim = fd.similarity()
    a = [row.get(os.path.realpath(f), -1) for f in sim["filename_from"]]
    b = [row.get(os.path.realpath(f), -1) for f in sim["filename_to"]]
    with open(args.out, "w") as out:
        out.write("a,b,similarity\n")
        for i, j, s in zip(a, b, sim["distance"], strict=True):
            if i >= 0 and j >= 0 and i != j:
                out.write(f"{i},{j},{float(s)!r}\n")
    print(json.dumps({"fastdup": fastdup.__version__, "run_seconds": seconds, "pairs_reported": len(sim)}))


if __name__ == "__main__":
    main()
