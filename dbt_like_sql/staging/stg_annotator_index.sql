-- description: A stable 0-based index j per annotator (sorted by annotator_id): the bit position of the annotator
-- description: in the answer-pattern masks of staging.stg_scored_items (at most 62 annotators).
-- column: annotator_id String
-- column: j Int64
SELECT
    annotator_id,
    CAST(row_number() OVER (ORDER BY annotator_id) - 1 AS BIGINT) AS j
FROM (SELECT DISTINCT annotator_id FROM raw.annotations) AS a
