-- Ferry transactional outbox, schema version 1, for the default table name.
-- outbox.Migrate runs exactly these statements (with the table's name);
-- apply this file with your own migration tool instead if you prefer.
CREATE TABLE IF NOT EXISTS ferry_outbox (
    seq          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id           text        NOT NULL,
    topic        text        NOT NULL,
    key          text        NOT NULL DEFAULT '',
    payload      bytea       NOT NULL DEFAULT '\x',
    headers      jsonb,
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    attempts     integer     NOT NULL DEFAULT 0,
    retry_at     timestamptz,
    last_error   text,
    published_at timestamptz
);
CREATE INDEX IF NOT EXISTS ferry_outbox_pending_idx ON ferry_outbox (seq) WHERE published_at IS NULL;
CREATE INDEX IF NOT EXISTS ferry_outbox_pending_key_idx ON ferry_outbox (key, seq) WHERE published_at IS NULL;
CREATE INDEX IF NOT EXISTS ferry_outbox_published_idx ON ferry_outbox (published_at) WHERE published_at IS NOT NULL;
COMMENT ON TABLE ferry_outbox IS 'ferry outbox v1';
