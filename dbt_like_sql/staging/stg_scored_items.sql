-- description: One row per (model version, scored and annotated item): the score and the item's answer pattern as
-- description: two bitmasks over the annotator index — `mask` (who answered) and `ones` (who answered 1). This is the
-- description: only step that regroups the long annotation table; it reruns when annotations or predictions change.
-- description: Items nobody annotated are absent (NC-ECE excludes them). Supports at most 62 annotators.
WITH item_bits AS (
    SELECT
        a.item_id,
        bit_or(CAST(1 AS BIGINT) << x.j) AS mask,
        bit_or(CAST(a.label AS BIGINT) << x.j) AS ones
    FROM raw.annotations AS a
    JOIN staging.stg_annotator_index AS x ON x.annotator_id = a.annotator_id
    GROUP BY a.item_id
)
SELECT p.model_version, p.item_id, p.score, b.mask, b.ones
FROM raw.predictions AS p
JOIN item_bits AS b ON b.item_id = p.item_id
