-- description: One row per scored and annotated item of the LATEST model version (staging.stg_model_versions, the
-- description: version the SQL marts report on): the score, its bin under the project's one
-- description: bin rule bin = min(floor(score*B), B-1), and the item's answer pattern as two bitmasks over the
-- description: annotator index — `mask` (who answered) and `ones` (who answered 1). This is the only step that
-- description: regroups the long annotation table; it reruns when annotations or predictions change, and the NC-ECE
-- description: mart then aggregates small integer keys only. Items nobody annotated are absent (NC-ECE excludes
-- description: them). Supports at most 62 annotators; B must match the calibration settings (n_bins, default 15).
-- param: n_bins = 15
-- column: model_version String
-- column: item_id String
-- column: score Float64
-- column: bin UInt16
-- column: mask Int64
-- column: ones Int64
WITH item_bits AS (
    SELECT
        a.item_id,
        bit_or(CAST(1 AS BIGINT) << x.j) AS mask,
        bit_or(CAST(a.label AS BIGINT) << x.j) AS ones
    FROM raw.annotations AS a
    JOIN staging.stg_annotator_index AS x ON x.annotator_id = a.annotator_id
    GROUP BY a.item_id
)
SELECT
    p.model_version,
    p.item_id,
    p.score,
    CAST(least(floor(p.score * CAST($n_bins AS DOUBLE)), CAST($n_bins AS BIGINT) - 1) AS USMALLINT) AS bin,
    b.mask,
    b.ones
FROM raw.predictions AS p
JOIN staging.stg_model_versions AS v ON v.model_version = p.model_version AND v.is_latest
JOIN item_bits AS b ON b.item_id = p.item_id
ORDER BY bin
