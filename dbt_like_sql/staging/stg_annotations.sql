-- description: Annotations typed and deduplicated for analysis: one row per (item_id, annotator_id) with the
-- description: number of annotators who labelled the item. Source: raw.annotations (already contract-checked).
-- column: item_id String
-- column: annotator_id String
-- column: label Int8
-- column: timestamp Datetime(time_unit='us', time_zone='UTC')
-- column: source_file String
-- column: n_annotators_on_item Int64
SELECT
    a.item_id,
    a.annotator_id,
    CAST(a.label AS TINYINT) AS label,
    a."timestamp",
    a.source_file,
    count(*) OVER (PARTITION BY a.item_id) AS n_annotators_on_item
FROM raw.annotations AS a
