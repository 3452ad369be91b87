package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferrymq/ferry/cmd/ferry/internal/ops"
	"github.com/ferrymq/ferry/handler"
)

func contextWithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

func (a *app) lagCmd() *cobra.Command {
	var topic, group string
	var watching bool
	var every time.Duration
	var times int
	c := &cobra.Command{
		Use:   "lag",
		Short: "Show how far a group is behind, per partition, shard or queue",
		Example: `  ferry lag --topic orders --group inventory
  ferry lag --topic orders --group inventory --watch --every 5s`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if every <= 0 {
				return usageError{fmt.Errorf("--every %s: want a positive duration", every)}
			}
			watch := time.Duration(0)
			if watching {
				watch = every
			}
			t, closeT, err := a.open(c.Context())
			if err != nil {
				return err
			}
			defer closeT()
			for {
				rows, err := ops.Lag(c.Context(), t, topic, group)
				if err != nil {
					if c.Context().Err() != nil && watch > 0 {
						return nil
					}
					return err
				}
				if watch > 0 && a.tty {
					fmt.Fprint(a.out, "\033[H\033[2J")
				}
				if a.output == "json" {
					if err := a.json(rows); err != nil {
						return err
					}
				} else {
					tr := make([][]string, len(rows))
					for i, r := range rows {
						tr[i] = []string{r.Topic, r.Group, r.Partition, strconv.FormatInt(r.Messages, 10), r.OldestAge.String()}
					}
					a.table([]string{"TOPIC", "GROUP", "PARTITION", "BEHIND", "OLDEST"}, tr)
				}
				times--
				if watch <= 0 || times == 0 {
					return nil
				}
				select {
				case <-c.Context().Done():
					return nil
				case <-time.After(watch):
				}
			}
		},
	}
	c.Flags().StringVar(&topic, "topic", "", "the topic (required)")
	c.Flags().StringVar(&group, "group", "", "the consumer group")
	c.Flags().BoolVar(&watching, "watch", false, "refresh in place until Ctrl-C")
	c.Flags().DurationVar(&every, "every", 2*time.Second, "with --watch, refresh this often")
	c.Flags().IntVar(&times, "times", 0, "with --watch, stop after this many reads (0: until Ctrl-C)")
	return c
}

func (a *app) offsetsCmd() *cobra.Command {
	c := &cobra.Command{
		Use:     "offsets",
		Short:   "Move a consumer group's position (Kafka, Redis Streams)",
		Example: `  ferry offsets reset --topic orders --group inventory --to-earliest --dry-run`,
	}
	var r ops.OffsetReset
	var earliest, latest bool
	var at string
	var parts []int32
	reset := &cobra.Command{
		Use:   "reset",
		Short: "Reset a group's offsets: earliest, latest, a time, an offset, or another group's",
		Long: `reset moves a stopped group's position. Kafka: committed offsets per partition;
refused while the group has members. Redis Streams: XGROUP SETID on each stream of the
topic; refused while a consumer of the group was seen in the last 30s. Other brokers
have no offsets to move: replay from the DLQ instead. Run with --dry-run first.`,
		Example: `  ferry offsets reset --url kafka://127.0.0.1:9092 --topic orders --group inventory --to-earliest --dry-run
  ferry offsets reset --topic orders --group inventory --to-time 2026-12-01T09:00:00Z
  ferry offsets reset --topic orders --group inventory --to-offset 1200 --partition 3
  ferry offsets reset --topic orders --group inventory-v2 --to-group inventory`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			switch {
			case earliest && latest:
				return usageError{fmt.Errorf("give one of --to-earliest and --to-latest")}
			case earliest:
				r.To = "earliest"
			case latest:
				r.To = "latest"
			}
			if at != "" {
				t, err := time.Parse(time.RFC3339, at)
				if err != nil {
					return usageError{fmt.Errorf("--to-time %q: want an RFC 3339 time", at)}
				}
				r.Time = t
			}
			r.Partitions = parts
			t, closeT, err := a.open(c.Context())
			if err != nil {
				return err
			}
			defer closeT()
			cs, err := ops.ResetOffsets(c.Context(), t, r)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.json(map[string]any{"topic": r.Topic, "group": r.Group, "dry_run": r.DryRun, "changes": cs})
			}
			rows := make([][]string, len(cs))
			for i, ch := range cs {
				rows[i] = []string{ch.Partition, ch.From, ch.To}
			}
			if r.DryRun {
				fmt.Fprintf(a.out, "dry run: group %s on %s would move:\n", r.Group, r.Topic)
			} else {
				fmt.Fprintf(a.out, "group %s on %s moved:\n", r.Group, r.Topic)
			}
			a.table([]string{"PARTITION", "FROM", "TO"}, rows)
			return nil
		},
	}
	f := reset.Flags()
	f.StringVar(&r.Topic, "topic", "", "the topic (required)")
	f.StringVar(&r.Group, "group", "", "the group to move (required)")
	f.BoolVar(&earliest, "to-earliest", false, "to the oldest retained message")
	f.BoolVar(&latest, "to-latest", false, "to the end: skip everything so far")
	f.StringVar(&at, "to-time", "", "to the first message at or after this RFC 3339 time")
	f.StringVar(&r.Offset, "to-offset", "", "to this offset (Kafka) or entry ID (Redis Streams)")
	f.StringVar(&r.FromGroup, "to-group", "", "to this other group's position")
	f.Int32SliceVar(&parts, "partition", nil, "Kafka: only these partitions (repeatable)")
	f.BoolVar(&r.DryRun, "dry-run", false, "show the moves and change nothing")
	f.DurationVar(&r.LiveIdle, "live-idle", ops.RedisLiveIdle, "Redis Streams: a consumer seen this recently is a live member")
	c.AddCommand(reset)
	return c
}

func (a *app) publishCmd() *cobra.Command {
	var topic, id, key, file string
	var headers []string
	var asJSON bool
	c := &cobra.Command{
		Use:   "publish [PAYLOAD]",
		Short: "Publish one message, or many (one per line) from stdin or a file",
		Long: `publish sends messages through the same Publisher as applications: each returns once
the broker confirmed it. With a PAYLOAD argument it sends one message; without, one per
line of stdin (or --file). With --json each line is {"id","key","headers","payload"}.
Messages without an ID get a random one. Ctrl-C stops between messages.`,
		Example: `  ferry publish --topic orders --id evt-1 --key order-7 -H tenant=acme '{"total":12}'
  ferry publish --topic orders --json --file orders.jsonl`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if topic == "" {
				return usageError{fmt.Errorf("give --topic")}
			}
			hs := map[string]string{}
			for _, h := range headers {
				k, v, ok := strings.Cut(h, "=")
				if !ok || k == "" {
					return usageError{fmt.Errorf("-H %q: want name=value", h)}
				}
				hs[k] = v
			}
			var msgs []*handler.Message
			if len(args) == 1 {
				if id == "" {
					id = ops.NewID()
				}
				m := &handler.Message{ID: id, Key: key, Topic: topic, Payload: []byte(args[0])}
				if len(hs) > 0 {
					m.Headers = hs
				}
				msgs = []*handler.Message{m}
			} else {
				var r io.Reader = a.in
				if file != "" {
					f, err := os.Open(file)
					if err != nil {
						return err
					}
					defer f.Close()
					r = f
				}
				var err error
				if msgs, err = ops.ReadMessages(r, topic, asJSON, key, hs); err != nil {
					return err
				}
			}
			t, closeT, err := a.open(c.Context())
			if err != nil {
				return err
			}
			defer closeT()
			bar, done := a.progress("publishing")
			n, err := ops.Publish(c.Context(), t, msgs, bar)
			done()
			if a.output == "json" {
				ids := make([]string, n)
				for i := range ids {
					ids[i] = msgs[i].ID
				}
				if jerr := a.json(map[string]any{"topic": topic, "published": n, "ids": ids}); jerr != nil {
					return jerr
				}
			} else {
				fmt.Fprintf(a.out, "published %d of %d to %s\n", n, len(msgs), topic)
			}
			return err
		},
	}
	c.Flags().StringVar(&topic, "topic", "", "destination topic (required)")
	c.Flags().StringVar(&id, "id", "", "message ID of the one message (default: random)")
	c.Flags().StringVar(&key, "key", "", "ordering key")
	c.Flags().StringArrayVarP(&headers, "header", "H", nil, "header name=value (repeatable)")
	c.Flags().StringVar(&file, "file", "", "read messages from this file instead of stdin")
	c.Flags().BoolVar(&asJSON, "json", false, "each input line is a JSON message")
	return c
}

func (a *app) tailCmd() *cobra.Command {
	var topic, ready string
	var count int
	c := &cobra.Command{
		Use:   "tail",
		Short: "Follow a topic without taking anyone's messages, where the broker allows",
		Long: `tail reads with a group of its own: Kafka, Redis Streams, NATS and memory a new group
from the end; RabbitMQ an exclusive auto-delete queue bound to the topic's exchange; MQTT
a plain subscription; SNS a queue of its own. It is impossible on a plain SQS queue (a
queue is its one group).`,
		Example: `  ferry tail --topic orders
  ferry tail --topic orders -o json -n 10`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			t, closeT, err := a.open(c.Context())
			if err != nil {
				return err
			}
			defer closeT()
			ctx, cancel := context.WithCancel(c.Context())
			defer cancel()
			seen := 0
			onReady := func() {
				if ready != "" {
					_ = os.WriteFile(ready, []byte("ready\n"), 0o644)
				}
			}
			return ops.Tail(ctx, t, a.url, topic, onReady, func(m *handler.Message) error {
				if a.output == "json" {
					_ = a.json(map[string]any{"id": m.ID, "key": m.Key, "topic": m.Topic, "headers": m.Headers, "payload": ops.Payload(m.Payload)})
				} else {
					fmt.Fprintf(a.out, "%s  key=%s  %s\n", m.ID, m.Key, short(ops.Payload(m.Payload).Text(), 200))
				}
				seen++
				if count > 0 && seen >= count {
					cancel()
				}
				return nil
			})
		},
	}
	c.Flags().StringVar(&topic, "topic", "", "the topic to follow (required)")
	c.Flags().IntVarP(&count, "count", "n", 0, "stop after this many messages (0: until Ctrl-C)")
	c.Flags().StringVar(&ready, "ready-file", "", "write this file once following (for scripts)")
	_ = c.Flags().MarkHidden("ready-file")
	return c
}

func (a *app) semanticsCmd() *cobra.Command {
	var topic, group string
	c := &cobra.Command{
		Use:   "semantics [URL]",
		Short: "Print the declared semantics of every transport, or of one URL with its options",
		Example: `  ferry semantics
  ferry semantics 'redis://127.0.0.1:6379?shards=4'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				rows := semanticsRows()
				if a.output == "json" {
					return a.json(rows)
				}
				fmt.Fprint(a.out, ops.Markdown(rows))
				return nil
			}
			r, err := ops.DeclaredURL(c.Context(), args[0], topic, group)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.json(r)
			}
			fmt.Fprint(a.out, ops.Markdown([]ops.SemanticsRow{r}))
			return nil
		},
	}
	c.Flags().StringVar(&topic, "topic", "", "the topic of the subscription to declare (default orders)")
	c.Flags().StringVar(&group, "group", "", "its group")
	return c
}
