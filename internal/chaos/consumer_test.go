package chaos_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/store/pgstore"
	"github.com/ferrymq/ferry/transport"
	_ "github.com/ferrymq/ferry/transport/jetstream"
	_ "github.com/ferrymq/ferry/transport/kafka"
	_ "github.com/ferrymq/ferry/transport/mqtt"
	_ "github.com/ferrymq/ferry/transport/rabbitmq"
	_ "github.com/ferrymq/ferry/transport/redisstream"
	_ "github.com/ferrymq/ferry/transport/sns"
	_ "github.com/ferrymq/ferry/transport/sqs"
)

// The consumer process. The test binary runs as one when roleEnv is
// "consumer": TestMain calls consumerMain, which never returns.
const (
	roleEnv   = "FERRY_CHAOS_ROLE"
	configEnv = "FERRY_CHAOS_CONSUMER" // the consumerConfig, as JSON
)

// consumerConfig is what a consumer process runs.
type consumerConfig struct {
	URL         string            // the transport's URL
	Topic       string            // the topic the events go to
	Group       string            // the consumer group every process joins
	Sub         string            // the Router's name for the subscription (the lot's subscription)
	Run         string            // the run: the effects' run column and the inbox's namespace
	Postgres    string            // PostgreSQL URL
	Options     map[string]string // Subscription.Options
	Concurrency int               // ferry.Concurrency
	// Dedupe off drops middleware.Deduplicate: the handler writes its
	// effect outside any inbox, so every redelivery applies it again.
	Dedupe bool
	// Ordered off subscribes with ferry.Unordered (and without Parking,
	// which needs order): a key's messages run concurrently.
	Ordered bool
}

// event is the payload of every message.
type event struct {
	Key string `json:"key"`
	Seq int    `json:"seq"`
}

// effectsDDL is the application's table: one row per effect, in the order
// the effects were written (n).
const effectsDDL = `CREATE TABLE IF NOT EXISTS ferry_chaos_effects (
	n   bigserial PRIMARY KEY,
	run text NOT NULL,
	key text NOT NULL,
	seq integer NOT NULL,
	id  text NOT NULL,
	pid integer NOT NULL,
	at  timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE INDEX IF NOT EXISTS ferry_chaos_effects_run ON ferry_chaos_effects (run, n)`

const insertEffect = `INSERT INTO ferry_chaos_effects (run, key, seq, id, pid) VALUES ($1, $2, $3, $4, $5)`

// consumerMain runs the consumer process: the recommended stack with the
// PostgreSQL inbox and lot, its handler writing each effect in the
// inbox's transaction. It prints "ready" once the Router's subscription is
// open, drains and exits 0 on SIGTERM, and exits at once when its stdin
// closes (the test process died).
func consumerMain() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := consume(logger); err != nil {
		logger.Error("chaos consumer", "err", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func consume(logger *slog.Logger) error {
	var cfg consumerConfig
	if err := json.Unmarshal([]byte(os.Getenv(configEnv)), &cfg); err != nil {
		return fmt.Errorf("%s: %w", configEnv, err)
	}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(3) // the test process is gone
	}()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	pcfg, err := pgxpool.ParseConfig(cfg.Postgres)
	if err != nil {
		return err
	}
	pcfg.MaxConns = int32(cfg.Concurrency + 2)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()

	octx, cancel := context.WithTimeout(ctx, time.Minute)
	tr, err := transport.Open(octx, cfg.URL)
	cancel()
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = tr.Close(cctx)
	}()

	inbox, err := pgstore.NewInbox(pool, pgstore.Namespace(cfg.Run))
	if err != nil {
		return err
	}
	lot, err := pgstore.NewLot(pool)
	if err != nil {
		return err
	}
	opts := []middleware.StackOption{middleware.WithLogger(logger)}
	if cfg.Ordered {
		opts = append(opts, middleware.Parking(lot))
	}
	if cfg.Dedupe {
		opts = append(opts, middleware.Deduplicate(inbox))
	}
	stack, err := middleware.Recommended(tr, opts...)
	if err != nil {
		return err
	}
	pid := os.Getpid()
	apply := handler.JSON(func(ctx context.Context, m *handler.Message, ev event) error {
		if !cfg.Dedupe {
			_, err := pool.Exec(ctx, insertEffect, cfg.Run, ev.Key, ev.Seq, m.ID, pid)
			return err
		}
		tx, err := pgstore.Tx(ctx) // the inbox's transaction: the effect commits with "m.ID is done"
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, insertEffect, cfg.Run, ev.Key, ev.Seq, m.ID, pid)
		return err
	})

	r, err := ferry.NewRouter(ferry.WithLogger(logger))
	if err != nil {
		return err
	}
	subOpts := []ferry.SubscriptionOption{ferry.Concurrency(cfg.Concurrency)}
	if !cfg.Ordered {
		subOpts = append(subOpts, ferry.Unordered())
	}
	sub := transport.Subscription{Topic: cfg.Topic, Group: cfg.Group, StartAtOldest: true, Options: cfg.Options}
	if err := r.Add(cfg.Sub, tr, sub, stack(apply), subOpts...); err != nil {
		return err
	}
	go func() {
		select {
		case <-r.Ready():
			fmt.Println("ready")
		case <-ctx.Done():
		}
	}()
	if err := r.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("run: %w", err)
	}
	return nil
}
