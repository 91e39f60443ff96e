-- Metadata pairs in the hour (and so day) rollups: keys up to 64 and values up to 256 characters,
-- counted as the rest of the gateway counts them (as JavaScript does, in UTF-16 code units: a
-- character beyond U+FFFF counts two). `length` counted bytes, so a key or value of non-ASCII text
-- within the limits (100 CJK characters are 300 bytes) was left out of the rollups while the minute
-- series, read from the logs, counted it. MODIFY QUERY swaps the view's query atomically; buckets
-- already rolled up keep the counts they had.

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
            arraySlice(arrayFilter(p -> (lengthUTF8(p.1) + countMatches(p.1, '[\\x{10000}-\\x{10FFFF}]')) <= 64 AND (lengthUTF8(p.2) + countMatches(p.2, '[\\x{10000}-\\x{10FFFF}]')) <= 256, CAST(metadata, 'Array(Tuple(String, String))')), 1, 16))) AS d
GROUP BY project_id, bucket, dim, value;
