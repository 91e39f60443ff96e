-- Request logs, one row per gateway request. Live and test keys write separate tables, so test
-- traffic never reaches production data or its analytics.
--
-- Tenant first in ORDER BY: every read names one project and a time range. ReplacingMergeTree on
-- (project_id, time, request_id) folds a request recorded twice into one row at merge time, and
-- listings skip such a twin before that merge. non_replicated_deduplication_window lets the engine
-- drop a batch retried with the same insert_deduplication_token (see docs/telemetry.md).

CREATE TABLE IF NOT EXISTS request_logs_live
(
    project_id String,
    time DateTime64(6, 'UTC') CODEC(Delta, ZSTD(1)),
    request_id String,
    key_id String,
    endpoint LowCardinality(String),
    model LowCardinality(String),
    provider LowCardinality(String),
    stream Bool,
    status UInt16,
    status_class LowCardinality(String) MATERIALIZED concat(toString(intDiv(status, 100)), 'xx'),
    error_type LowCardinality(String),
    error_code LowCardinality(String),
    cache LowCardinality(String),
    user_id String,
    metadata Map(String, String),
    prompt_tokens UInt32,
    completion_tokens UInt32,
    cost_usd Decimal(18, 12),
    cost_saved_usd Decimal(18, 12),
    latency_ms Float32,
    ttfb_ms Float32,
    upstream_latency_ms Float32,
    -- When the bodies are dropped: the writer sets it from SVC_TELEMETRY_BODY_TTL_DAYS, so a changed
    -- setting applies to new rows without an ALTER.
    bodies_expire_at DateTime('UTC'),
    request_body String CODEC(ZSTD(1)) TTL bodies_expire_at,
    response_body String CODEC(ZSTD(1)) TTL bodies_expire_at,
    INDEX idx_request_id request_id TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_user_id user_id TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_metadata_keys mapKeys(metadata) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_metadata_values mapValues(metadata) TYPE bloom_filter(0.01) GRANULARITY 1
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(time)
ORDER BY (project_id, time, request_id)
SETTINGS non_replicated_deduplication_window = 10000;

-- The same columns, indexes, TTLs, engine and settings as the live table.
CREATE TABLE IF NOT EXISTS request_logs_test AS request_logs_live;
