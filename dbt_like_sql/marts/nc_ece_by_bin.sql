-- stage: calibration
-- description: Per-bin noise-corrected calibration table for the latest model version, in SQL.
-- description: Must equal noisycal_platform.calibration.nc_ece(...).bins to 1e-9 (tests/sql/test_marts.py):
-- description: bin = min(floor(score*B), B-1); corrected label = sum_j w_j (A_ij - a_j)/delta_j / sum_j w_j over
-- description: the annotators present; items with no annotation or zero total weight are excluded (seed 000 §3).
-- param: n_bins = 15
WITH latest AS (
    SELECT model_version
    FROM raw.predictions
    GROUP BY model_version
    ORDER BY max(registered_at) DESC, model_version DESC
    LIMIT 1
),
channels AS (
    SELECT c.annotator_id, c.fpr, c.gap, c.weight
    FROM calibration.channel_estimates AS c
    WHERE c.model_version = (SELECT model_version FROM latest)
),
corrected AS (
    SELECT
        a.item_id,
        sum(ch.weight * (a.label - ch.fpr) / ch.gap) / sum(ch.weight) AS corrected_label
    FROM staging.stg_annotations AS a
    JOIN channels AS ch ON ch.annotator_id = a.annotator_id
    GROUP BY a.item_id
    HAVING sum(ch.weight) > 0
),
binned AS (
    SELECT
        least(floor(p.score * CAST($n_bins AS DOUBLE)), CAST($n_bins AS BIGINT) - 1)::BIGINT AS bin,
        p.score,
        c.corrected_label
    FROM raw.predictions AS p
    JOIN corrected AS c ON c.item_id = p.item_id
    WHERE p.model_version = (SELECT model_version FROM latest)
)
SELECT
    (SELECT model_version FROM latest) AS model_version,
    bin,
    count(*) AS n,
    avg(score) AS mean_score,
    avg(corrected_label) AS mean_corrected_label,
    avg(corrected_label) - avg(score) AS residual
FROM binned
GROUP BY bin
ORDER BY bin
