"""Asset selections the integration tests run, named once: each list is a chain that can be materialised alone."""

CALIBRATION_INPUTS = [  # unpartitioned: the annotations every model version is calibrated against
    "raw/annotations",
    "raw/reference_labels",
    "staging/stg_annotations",
    "staging/stg_annotator_index",
]
CALIBRATION_PER_VERSION = [  # one model version's predictions to its recalibration report
    "raw/predictions",
    "staging/stg_scored_items",
    "staging/stg_model_versions",
    "calibration/channel_estimates",
    "calibration/nc_ece_report",
    "calibration/recalibrators",
    "calibration/recalibration_report",
]
CALIBRATION_CHAIN = [*CALIBRATION_INPUTS, *CALIBRATION_PER_VERSION, "calibration/nc_ece_by_bin"]
CLEANING_RANKING_CHAIN = [  # raw images to the confirmation queue of one dataset
    "raw/images",
    "cleaning/ssl_encoder",
    "cleaning/embeddings",
    "cleaning/rank_irrelevant",
    "cleaning/rank_near_duplicates",
    "cleaning/rank_label_errors",
    "cleaning/confirmation_queue",
]
