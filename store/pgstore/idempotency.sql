-- Ferry idempotency records, schema version 1, for the default table name.
-- pgstore.MigrateIdempotency runs exactly these statements (with the table's name);
-- apply this file with your own migration tool instead if you prefer.
CREATE TABLE IF NOT EXISTS ferry_idempotency (
    namespace  text        NOT NULL,
    key        text        NOT NULL,
    state      smallint    NOT NULL,
    token      text,
    result     bytea,
    expires_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (namespace, key)
);
CREATE INDEX IF NOT EXISTS ferry_idempotency_expires_at_idx ON ferry_idempotency (expires_at);
COMMENT ON TABLE ferry_idempotency IS 'ferry idempotency v1';
