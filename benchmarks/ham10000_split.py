"""Split HAM10000 once, by lesion, into a tuning half and an evaluation half; writes the tuning lesions' list.

Every image of a lesion goes to the same half (same-lesion pairs never straddle the split), and the two lesions
of each audited pair (Abhishek et al. 2024, different lesion_ids showing one lesion) are kept together too, by
a union-find over those pairs. Groups are shuffled with a fixed seed and taken into the tuning half until it
holds half of the images. The CSV is committed: every cleaning setting is chosen on the tuning lesions and
every reported figure comes from the others (``bench_ham10000.py --half tuning|evaluation``).

    .venv/bin/python benchmarks/ham10000_split.py            # rewrites benchmarks/ham10000_tuning_lesions.csv
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import polars as pl

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "ham10000_200x150"
OUT = Path(__file__).resolve().parent / "ham10000_tuning_lesions.csv"
SEED = 23


def lesion_groups(lesions: list[str], links: list[tuple[str, str]]) -> dict[str, str]:
    """Each lesion's group representative: lesions joined by an audited pair share one group."""
    parent = {lesion: lesion for lesion in lesions}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in links:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return {lesion: find(lesion) for lesion in lesions}


def tuning_lesions(meta: pl.DataFrame, audited: pl.DataFrame, seed: int = SEED) -> list[str]:
    """The lesions of the tuning half (sorted): whole groups, shuffled by ``seed``, until half the images."""
    lesions = sorted(meta["lesion_id"].unique().to_list())
    group = lesion_groups(lesions, list(audited.select("lesion_id_a", "lesion_id_b").iter_rows()))
    sizes = meta.group_by("lesion_id").len().with_columns(
        pl.col("lesion_id").replace_strict(group).alias("group"))
    per_group = sizes.group_by("group").agg(pl.col("len").sum(), pl.col("lesion_id")).sort("group")
    order = np.random.default_rng(seed).permutation(per_group.height)
    taken = np.cumsum(per_group["len"].to_numpy()[order]) <= meta.height / 2
    chosen = per_group[order[taken].tolist()]
    return sorted(chosen["lesion_id"].explode().to_list())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    meta = pl.read_csv(DATA / "metadata.csv")
    audited = pl.read_csv(DATA / "pairs_extra_abhishek2024.csv")
    lesions = tuning_lesions(meta, audited, args.seed)
    pl.DataFrame({"lesion_id": lesions}).write_csv(args.out)
    images = meta.filter(pl.col("lesion_id").is_in(lesions)).height
    print(f"{args.out.name}: {len(lesions)} tuning lesions, {images} of {meta.height} images (seed {args.seed})")


if __name__ == "__main__":
    main()
