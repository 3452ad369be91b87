-- Ferry delayed-message schedule, schema version 1, for the default table name.
CREATE TABLE IF NOT EXISTS ferry_schedule (
    seq        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    due_at     timestamptz NOT NULL,
    id         text        NOT NULL,
    topic      text        NOT NULL,
    key        text        NOT NULL DEFAULT '',
    payload    bytea       NOT NULL DEFAULT '\x',
    headers    jsonb,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS ferry_schedule_due_idx ON ferry_schedule (due_at, seq);
COMMENT ON TABLE ferry_schedule IS 'ferry schedule v1';
