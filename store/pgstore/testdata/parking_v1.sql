-- Ferry parking lot, schema version 1, for the default table prefix.
-- pgstore.MigrateParking runs exactly these statements (with the prefix given);
-- apply this file with your own migration tool instead if you prefer.
CREATE TABLE IF NOT EXISTS ferry_parking_keys (
    subscription    text        NOT NULL,
    key             text        NOT NULL,
    first_id        text        NOT NULL,
    error           text        NOT NULL,
    class           text        NOT NULL,
    attempts        integer     NOT NULL,
    failed_at       timestamptz,
    parked_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_error      text,
    last_class      text,
    last_attempts   integer,
    last_failed_at  timestamptz,
    failed_releases integer     NOT NULL DEFAULT 0,
    seq             bigint      NOT NULL DEFAULT 0,
    count           integer     NOT NULL DEFAULT 0,
    lock_token      text,
    lock_until      timestamptz,
    lease_ms        bigint,
    PRIMARY KEY (subscription, key)
);
CREATE TABLE IF NOT EXISTS ferry_parking_messages (
    subscription text        NOT NULL,
    key          text        NOT NULL,
    seq          bigint      NOT NULL,
    id           text        NOT NULL,
    topic        text        NOT NULL,
    payload      bytea,
    headers      jsonb,
    facts        jsonb       NOT NULL,
    parked_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (subscription, key, seq)
);
CREATE UNIQUE INDEX IF NOT EXISTS ferry_parking_messages_id_idx ON ferry_parking_messages (subscription, key, id) WHERE id <> '';
CREATE TABLE IF NOT EXISTS ferry_parking_versions (
    subscription text   PRIMARY KEY,
    version      bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS ferry_parking_audit (
    id              bigserial   PRIMARY KEY,
    subscription    text        NOT NULL,
    key             text        NOT NULL,
    first_id        text        NOT NULL,
    error           text        NOT NULL,
    class           text        NOT NULL,
    attempts        integer     NOT NULL,
    failed_at       timestamptz,
    parked_at       timestamptz NOT NULL,
    failed_releases integer     NOT NULL,
    count           integer     NOT NULL,
    ids             text[]      NOT NULL,
    dropped_by      text        NOT NULL,
    reason          text        NOT NULL,
    dropped_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS ferry_parking_audit_subscription_idx ON ferry_parking_audit (subscription, id);
COMMENT ON TABLE ferry_parking_keys IS 'ferry parking v1';
