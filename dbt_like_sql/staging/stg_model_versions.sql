-- description: One row per model version: when it was registered and how many items it scored; `is_latest` marks
-- description: the most recently registered version (ties: the larger version name), which the marts report on.
-- column: model_version String
-- column: registered_at Datetime(time_unit='us', time_zone='UTC')
-- column: n_items Int64
-- column: is_latest Boolean
SELECT
    model_version,
    max(registered_at) AS registered_at,
    count(*) AS n_items,
    row_number() OVER (ORDER BY max(registered_at) DESC, model_version DESC) = 1 AS is_latest
FROM raw.predictions
GROUP BY model_version
