"""Cleaning, first sub-stage: the self-supervised encoder of each dataset and the embeddings it gives.

raw/images -> ssl_encoder -> embeddings (the learned encoder and the non-learned baseline).
"""

import dagster as dg
import polars as pl

from assets._shell import failing_on
from assets.cleaning.keys import IMAGES_IN, SSL_ENCODER
from assets.policy import CLEANING, COMPUTE
from assets.progress import epoch_progress, timed
from noisycal_platform.cleaning.pipeline.embeddings import (
    EMBEDDING_KINDS,
    embeddings_table,
    encoder_choice,
    encoder_config,
    ssl_encoder_table,
)
from noisycal_platform.cleaning.pipeline.schemas import EMBEDDINGS_SCHEMA, ENCODER_SCHEMA
from resources.compute import ComputeResource
from resources.executor import kernel_client
from resources.inbox import InboxResource
from resources.settings import SettingsResource

__all__ = ["embeddings", "ssl_encoder"]


@CLEANING.asset(
    **COMPUTE,
    ins=IMAGES_IN,
    schema=ENCODER_SCHEMA,
    description="The dataset's encoder, chosen from its images (encoder: auto; the choice and why in the metadata): "
    "a frozen ImageNet EfficientNet-Lite for real photographs, or for tiny images a DINO ViT trained from random "
    "initialisation on the dataset's own images (Gröger et al. 2023 §3.6), weights in artifacts/<sha256>.pt "
    "(loaded with weights_only=True), reused while the dataset content and the configuration are unchanged.",
)
def ssl_encoder(
    context: dg.AssetExecutionContext,
    images: pl.DataFrame,
    inbox: InboxResource,
    compute: ComputeResource,
    settings: SettingsResource,
) -> dg.Output[pl.DataFrame]:
    # a bad encoder setting or checkpoint file (missing keys, wrong layout, no such file) is a ValueError naming it:
    # it fails the step once instead of being retried twice
    with failing_on(ValueError):
        config = encoder_config(
            settings.encoder_preset, settings.encoder_overrides, device=compute.torch_device(), seed=settings.seed
        )
        compute.apply_threads()
        choice = encoder_choice(images, **settings.encoder_keys())
        frame = ssl_encoder_table(
            images,
            config,
            preset=settings.encoder_preset,
            artifacts=inbox.layout.artifacts,
            choice=choice,
            progress=epoch_progress(context, "ssl_encoder"),
            train_sample=settings.encoder_train_sample,
        )
    row = frame.row(0, named=True)
    return dg.Output(
        frame,
        metadata={
            "sha256": row["sha256"],
            "weights": row["artifact"],
            "preset": row["preset"],
            "reused_cached_weights": row["reused"],
            "train_seconds": row["train_seconds"],
            "train_images": row["n_images"],
            "images_per_second": row["images_per_second"],
            **choice.metadata(),
        },
    )


@CLEANING.asset(
    **COMPUTE,
    ins={**IMAGES_IN, "ssl_encoder": dg.AssetIn(SSL_ENCODER)},
    schema=EMBEDDINGS_SCHEMA,
    description="One row per embedding kind naming the cache file (float32 .npy, one row per image in index "
    "order, with its sha256) that holds the L2-normalised teacher CLS token (dino) or the non-learned baseline "
    "(downsampled pixels + colour histogram), cached by content hash; the rankings open it memory-mapped.",
)
def embeddings(
    context: dg.AssetExecutionContext,
    images: pl.DataFrame,
    ssl_encoder: pl.DataFrame,
    inbox: InboxResource,
    compute: ComputeResource,
    settings: SettingsResource,
):
    encoder = ssl_encoder.row(0, named=True)
    compute.apply_threads()  # torch intra-op threads of the frozen encoder's forward pass (0 = torch default)
    with kernel_client(settings) as client:
        frame, hit = embeddings_table(
            images,
            encoder,
            inbox.layout.cache / "embeddings",
            device=compute.torch_device(),
            timed=lambda label, n, fn: timed(context, label, n, fn),
            client=client,
            artifacts=inbox.layout.artifacts,
        )
    kinds = {row["embedding_kind"]: row for row in frame.iter_rows(named=True)}
    dims = {f"dim_{k}": kinds[k]["dim"] for k in EMBEDDING_KINDS}
    files = {f"cache_file_{k}": dg.MetadataValue.path(kinds[k]["cache_file"]) for k in EMBEDDING_KINDS}
    meta = {"images": images.height, **dims, **files, "cache_hit": hit, "encoder": encoder["preset"],
            "encoder_sha256": encoder["sha256"]}
    return dg.Output(frame, metadata=meta)
