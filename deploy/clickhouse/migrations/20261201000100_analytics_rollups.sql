-- Analytics rollups of live traffic, one AggregatingMergeTree table per granularity, each fed by
-- one materialized view on request_logs_live. A row is (project, dimension, value, bucket): the
-- dimension '' with the value '' is the project's total; 'model', 'user', 'key' and 'status' group
-- by those columns; 'metadata.<key>' groups by one metadata key's value. Each log row is expanded
-- (ARRAY JOIN) into one row per dimension before aggregation.
--
-- One view per table (days from hours), not one per dimension: every view costs a part per insert, and the writer's
-- inserts are small and frequent, so fewer views keep an insert cheap (about 3x cheaper here).
-- The per-minute table holds the project totals only: per minute, even model, key or status make
-- about as many rows as there are logs, and cost more than half the ingest rate; a minute series
-- grouped by anything scans the logs instead, over at most 24 hours. Day buckets have their own
-- table so that long daily series stay small.
--
-- ORDER BY (project_id, dim, value, bucket): one group's series is one range of the key, so the
-- top groups' series are read without the other groups' latency states; index_granularity 1024
-- because the latency states of a whole granule are read to get a few rows of it.
-- Latency percentiles are quantilesState (reservoir sampling of 8192 values: exact below that).
-- Metadata: at most 16 pairs a request, keys up to 64 and values up to 256 characters, so one
-- client's metadata cannot blow up the rollups.
-- The engine drops a retried insert in the views too (the writer sets
-- deduplicate_blocks_in_dependent_materialized_views), hence the window on every table.

CREATE TABLE IF NOT EXISTS analytics_live_1m
(
    project_id String,
    bucket DateTime('UTC'),
    dim LowCardinality(String),
    value String,
    requests SimpleAggregateFunction(sum, UInt64),
    errors SimpleAggregateFunction(sum, UInt64),
    cache_hits SimpleAggregateFunction(sum, UInt64),
    prompt_tokens SimpleAggregateFunction(sum, UInt64),
    completion_tokens SimpleAggregateFunction(sum, UInt64),
    cost_usd SimpleAggregateFunction(sum, Decimal(38, 12)),
    latency_ms AggregateFunction(quantiles(0.5, 0.95, 0.99), Float32)
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(bucket)
ORDER BY (project_id, dim, value, bucket)
SETTINGS non_replicated_deduplication_window = 10000, index_granularity = 1024;

CREATE MATERIALIZED VIEW IF NOT EXISTS analytics_live_1m_mv TO analytics_live_1m AS
SELECT
    project_id,
    toStartOfMinute(time) AS bucket,
    '' AS dim,
    '' AS value,
    count() AS requests,
    countIf(status >= 400) AS errors,
    countIf(cache = 'HIT') AS cache_hits,
    sum(toUInt64(prompt_tokens)) AS prompt_tokens,
    sum(toUInt64(completion_tokens)) AS completion_tokens,
    sum(toDecimal128(cost_usd, 12)) AS cost_usd,
    quantilesState(0.5, 0.95, 0.99)(latency_ms) AS latency_ms
FROM request_logs_live
GROUP BY project_id, bucket;

-- Every rollup table has the columns, key and settings of the per-minute one.
CREATE TABLE IF NOT EXISTS analytics_live_1h AS analytics_live_1m;

CREATE MATERIALIZED VIEW IF NOT EXISTS analytics_live_1h_mv TO analytics_live_1h AS
SELECT
    project_id,
    toStartOfHour(time) AS bucket,
    d.1 AS dim,
    d.2 AS value,
    count() AS requests,
    countIf(status >= 400) AS errors,
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

-- Partitioned by year: a day table holds few rows per month.
CREATE TABLE IF NOT EXISTS analytics_live_1d AS analytics_live_1m
ENGINE = AggregatingMergeTree
PARTITION BY toYear(bucket)
ORDER BY (project_id, dim, value, bucket)
SETTINGS non_replicated_deduplication_window = 10000, index_granularity = 1024;

-- Days are rolled up from hours, not from the logs: an hour's rows are far fewer than its logs
-- times their dimensions, so this view does a fraction of the work.
CREATE MATERIALIZED VIEW IF NOT EXISTS analytics_live_1d_mv TO analytics_live_1d AS
SELECT
    project_id,
    toStartOfDay(h.bucket) AS bucket,
    dim,
    value,
    sum(h.requests) AS requests,
    sum(h.errors) AS errors,
    sum(h.cache_hits) AS cache_hits,
    sum(h.prompt_tokens) AS prompt_tokens,
    sum(h.completion_tokens) AS completion_tokens,
    sum(h.cost_usd) AS cost_usd,
    quantilesMergeState(0.5, 0.95, 0.99)(h.latency_ms) AS latency_ms
FROM analytics_live_1h AS h
GROUP BY project_id, bucket, dim, value;
