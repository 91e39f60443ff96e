-- Errors in the rollups: a request counts as an error when the client got one, as a 4xx/5xx status
-- or as an error event inside a stream already answered 200 (logged with status 200 and the
-- event's error_type: a stream the upstream broke off). Before, only status >= 400 counted, so a
-- stream that failed mid-way was counted as a success while a client that left (499) was not.
-- MODIFY QUERY swaps each view's query atomically, so no insert meanwhile misses the rollups.
-- Buckets already rolled up keep the counts they had.

ALTER TABLE analytics_live_1m_mv MODIFY QUERY
SELECT
    project_id,
    toStartOfMinute(time) AS bucket,
    '' AS dim,
    '' AS value,
    count() AS requests,
    countIf(status >= 400 OR error_type != '') AS errors,
    countIf(cache = 'HIT') AS cache_hits,
    sum(toUInt64(prompt_tokens)) AS prompt_tokens,
    sum(toUInt64(completion_tokens)) AS completion_tokens,
    sum(toDecimal128(cost_usd, 12)) AS cost_usd,
    quantilesState(0.5, 0.95, 0.99)(latency_ms) AS latency_ms
FROM request_logs_live
GROUP BY project_id, bucket;

ALTER TABLE analytics_live_1h_mv MODIFY QUERY
SELECT
    project_id,
    toStartOfHour(time) AS bucket,
    d.1 AS dim,
    d.2 AS value,
    count() AS requests,
    countIf(status >= 400 OR error_type != '') AS errors,
    countIf(cache = 'HIT') AS cache_hits,
    sum(toUInt64(prompt_tokens)) AS prompt_tokens,
    sum(toUInt64(completion_tokens)) AS completion_tokens,
    sum(toDecimal128(cost_usd, 12)) AS cost_usd,
    quantilesState(0.5, 0.95, 0.99)(latency_ms) AS latency_ms
FROM request_logs_live
ARRAY JOIN arrayConcat(
        [('', ''), ('model', toString(model)), ('user', user_id), ('key', key_id), ('status', toString(status))],
        arrayMap(p -> (concat('metadata.', p.1), p.2),
            arraySlice(arrayFilter(p -> length(p.1) <= 64 AND length(p.2) <= 256, CAST(metadata, 'Array(Tuple(String, String))')), 1, 16))) AS d
GROUP BY project_id, bucket, dim, value;
