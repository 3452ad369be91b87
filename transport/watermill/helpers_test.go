package watermill_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferrymq/ferry/internal/testenv"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/watermill"
)

// wait bounds every blocking step of a test.
const wait = 10 * time.Second

// sqlTables names the tables of a topic: the messages and the offsets
// table. A topic name from transporttest.UniqueName is up to 60
// characters, and PostgreSQL cuts identifiers at 63, so watermill-sql's
// default names ("watermill_<topic>") would lose the random suffix; the
// tables are named after a hash of the topic instead.
func sqlTables(topic string) (messages, offsets string) {
	sum := sha256.Sum256([]byte(topic))
	h := hex.EncodeToString(sum[:12])
	return `"wm_` + h + `"`, `"wmo_` + h + `"`
}

// sqlSchema is watermill-sql's default PostgreSQL schema (a log per topic,
// consumer groups with offsets) with BYTEA payloads, so that any payload
// round-trips, and the tables of sqlTables.
var sqlSchema = wsql.DefaultPostgreSQLSchema{
	GenerateMessagesTableName: func(topic string) string { m, _ := sqlTables(topic); return m },
	GeneratePayloadType:       func(string) string { return "BYTEA" },
}

var sqlOffsets = wsql.DefaultPostgreSQLOffsetsAdapter{
	GenerateMessagesOffsetsTableName: func(topic string) string { _, o := sqlTables(topic); return o },
}

// sqlPool is a pool on the machine's PostgreSQL, closed when tb ends.
func sqlPool(tb testing.TB) *pgxpool.Pool { return testenv.Postgres(tb, 40) }

// dropTopic drops a topic's tables when tb ends.
func dropTopic(tb testing.TB, pool *pgxpool.Pool, topic string) {
	tb.Cleanup(func() {
		m, o := sqlTables(topic)
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+m+", "+o); err != nil {
			tb.Logf("drop the tables of %s: %v", topic, err)
		}
	})
}

// uuidFits refuses what the default schema would not keep: a UUID longer
// than its VARCHAR(36), and a NUL, which PostgreSQL's text and JSON refuse,
// in the UUID or the metadata (the Key's field or a header).
func uuidFits(m *message.Message) error {
	if len(m.UUID) > 36 {
		return fmt.Errorf("UUID of %d bytes; the uuid column holds 36", len(m.UUID))
	}
	if strings.ContainsRune(m.UUID, 0) {
		return errors.New("the UUID (Message.ID) holds a NUL, which PostgreSQL's text refuses")
	}
	for k, v := range m.Metadata {
		if strings.ContainsRune(k, 0) || strings.ContainsRune(v, 0) {
			if k == watermill.DefaultKeyField {
				return errors.New("the Key's metadata field holds a NUL, which PostgreSQL's JSON refuses")
			}
			return errors.New("a header (metadata) holds a NUL, which PostgreSQL's JSON refuses")
		}
	}
	return nil
}

// sqlOptions are the bridge options that declare what watermill-sql's
// default schema does: one consumer of a group at a time, one message in
// flight, in insert order; a Nack redelivers after ResendInterval, a closed
// consumer's message within a poll (plus the time other transactions of
// the server keep new rows invisible).
func sqlOptions() []watermill.Option {
	return []watermill.Option{
		watermill.Ordering(transport.OrderPerTopic),
		watermill.InFlight(1),
		watermill.RedeliveryDelay(3 * time.Second),
		watermill.Validate(uuidFits),
	}
}

// newSQLBridge returns a bridge over watermill-sql on pool, as its own
// client: its own publisher, and a subscriber per group.
func newSQLBridge(tb testing.TB, pool *pgxpool.Pool, opts ...watermill.Option) *watermill.Transport {
	return newSQLBridgeWith(tb, pool, func(*wsql.SubscriberConfig) {}, opts...)
}

// newSQLBridgeWith is newSQLBridge with subscribers configured by adjust.
func newSQLBridgeWith(tb testing.TB, pool *pgxpool.Pool, adjust func(*wsql.SubscriberConfig), opts ...watermill.Option) *watermill.Transport {
	tb.Helper()
	db := wsql.BeginnerFromPgx(pool)
	pub, err := wsql.NewPublisher(db, wsql.PublisherConfig{SchemaAdapter: sqlSchema, AutoInitializeSchema: true}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	subscribers := func(ctx context.Context, group string) (message.Subscriber, error) {
		cfg := wsql.SubscriberConfig{
			ConsumerGroup:    group,
			SchemaAdapter:    sqlSchema,
			OffsetsAdapter:   sqlOffsets,
			InitializeSchema: true,
			PollInterval:     50 * time.Millisecond,
			ResendInterval:   50 * time.Millisecond,
			RetryInterval:    100 * time.Millisecond,
		}
		adjust(&cfg)
		return wsql.NewSubscriber(db, cfg, nil)
	}
	all := append(sqlOptions(), watermill.Subscribers(subscribers))
	b, err := watermill.New(context.Background(), pub, nil, append(all, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { closeConn(tb, b) })
	return b
}

// closeConn closes a transport, tolerating one already closed.
func closeConn(tb testing.TB, t transport.Transport) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := t.Close(ctx); err != nil && !errors.Is(err, transport.ErrClosed) {
		tb.Errorf("Close: %v", err)
	}
}
