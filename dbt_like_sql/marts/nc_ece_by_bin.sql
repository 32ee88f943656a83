-- stage: calibration
-- description: Per-bin noise-corrected calibration table for the latest model version, in SQL.
-- description: Must equal noisycal_platform.calibration.nc_ece(...).bins to 1e-9 (tests/sql/test_marts.py):
-- description: bin = min(floor(score*B), B-1) (staged in staging.stg_scored_items); corrected label of an item = sum_j w_j (A_ij - a_j)/delta_j / sum_j w_j
-- description: over the annotators present; items with no annotation or zero total weight are excluded (Hanada and Futami 2026 §3).
-- description: Like the library, it aggregates per (bin, answer pattern) first and applies the channels to the few
-- description: distinct patterns, so its cost is one aggregation of staging.stg_scored_items over small integers.
-- column: model_version String
-- column: bin Int64
-- column: n Int64
-- column: mean_score Float64
-- column: mean_corrected_label Float64
-- column: residual Float64
WITH latest AS (
    SELECT model_version FROM staging.stg_model_versions WHERE is_latest
),
cells AS (
    SELECT
        s.bin,
        s.mask,
        s.ones,
        count(*) AS n,
        sum(s.score) AS sum_score
    FROM staging.stg_scored_items AS s  -- holds the latest version only
    GROUP BY ALL
),
channels AS (
    SELECT x.j, c.fpr, c.gap, c.weight
    FROM calibration.channel_estimates AS c
    JOIN staging.stg_annotator_index AS x ON x.annotator_id = c.annotator_id
    WHERE c.model_version = (SELECT model_version FROM latest)
),
corrected AS (
    SELECT
        p.mask,
        p.ones,
        sum(ch.weight * (CAST((p.ones >> ch.j) & 1 AS DOUBLE) - ch.fpr) / ch.gap) / sum(ch.weight) AS y
    FROM (SELECT DISTINCT mask, ones FROM cells) AS p
    JOIN channels AS ch ON ((p.mask >> ch.j) & 1) = 1
    GROUP BY p.mask, p.ones
    HAVING sum(ch.weight) > 0
)
SELECT
    (SELECT model_version FROM latest) AS model_version,
    CAST(c.bin AS BIGINT) AS bin,
    CAST(sum(c.n) AS BIGINT) AS n,
    sum(c.sum_score) / sum(c.n) AS mean_score,
    sum(c.n * k.y) / sum(c.n) AS mean_corrected_label,
    sum(c.n * k.y) / sum(c.n) - sum(c.sum_score) / sum(c.n) AS residual
FROM cells AS c
JOIN corrected AS k ON k.mask = c.mask AND k.ones = c.ones
GROUP BY c.bin
ORDER BY c.bin
