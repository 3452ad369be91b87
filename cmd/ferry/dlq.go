package main

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferrymq/ferry/cmd/ferry/internal/ops"
)

// dlqFlags name a DLQ.
type dlqFlags struct{ topic, group, dlq string }

func (f *dlqFlags) add(c *cobra.Command) {
	c.Flags().StringVar(&f.group, "group", "", "consumer group (subscription) whose DLQ to use")
	c.Flags().StringVar(&f.topic, "topic", "", "topic the group consumes (where the transport names DLQs by topic)")
	c.Flags().StringVar(&f.dlq, "dlq", "", "the DLQ's name, instead of --group")
}

// selFlags select dead letters.
type selFlags struct {
	keys         []string
	since, until string
	all          bool
}

func (f *selFlags) add(c *cobra.Command) {
	c.Flags().StringSliceVar(&f.keys, "key", nil, "select the dead letters with this key (repeatable)")
	c.Flags().StringVar(&f.since, "since", "", "select those that first failed at or after this time (RFC 3339) or this long ago (1h)")
	c.Flags().StringVar(&f.until, "until", "", "select those that first failed before this time (RFC 3339) or this long ago")
	c.Flags().BoolVar(&f.all, "all", false, "select every dead letter")
}

// parseTime reads an RFC 3339 time or a duration ago.
func parseTime(flag, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		return time.Now().Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, usageError{fmt.Errorf("--%s %q: want an RFC 3339 time or a duration ago like 2h", flag, s)}
	}
	return t, nil
}

func (f *selFlags) selection(ids []string) (ops.Selection, error) {
	s := ops.Selection{IDs: ids, Keys: f.keys, All: f.all}
	var err error
	if s.Since, err = parseTime("since", f.since); err != nil {
		return s, err
	}
	if s.Until, err = parseTime("until", f.until); err != nil {
		return s, err
	}
	return s, nil
}

func (a *app) dlqCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "dlq",
		Short: "List, show, replay and purge dead letters",
		Example: `  ferry dlq ls --group inventory
  ferry dlq replay --group inventory --all`,
	}
	c.AddCommand(a.dlqLs(), a.dlqShow(), a.dlqReplay(), a.dlqPurge())
	return c
}

func (a *app) dlqLs() *cobra.Command {
	var f dlqFlags
	var limit int
	c := &cobra.Command{
		Use:   "ls",
		Short: "List the dead letters of a group, oldest first",
		Example: `  ferry dlq ls --url redis://127.0.0.1:6379 --group inventory
  ferry dlq ls --group inventory -o json | jq -r '.[].id'`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			t, closeT, err := a.open(c.Context())
			if err != nil {
				return err
			}
			defer closeT()
			name, err := ops.DLQOf(t, f.topic, f.group, f.dlq)
			if err != nil {
				return err
			}
			ds, err := ops.ListDLQ(c.Context(), t, name, limit)
			if err != nil {
				return err
			}
			if a.output == "json" {
				if ds == nil {
					ds = []ops.DeadLetter{}
				}
				return a.json(ds)
			}
			rows := make([][]string, len(ds))
			for i, d := range ds {
				rows[i] = []string{d.ID, dash(d.Key), d.Class, strconv.Itoa(d.Attempts), stamp(d.FirstFailure), d.Age.String(), short(firstLine(d.Reason), 60)}
			}
			a.table([]string{"ID", "KEY", "CLASS", "ATTEMPTS", "FIRST FAILURE", "AGE", "REASON"}, rows)
			return nil
		},
	}
	f.add(c)
	c.Flags().IntVar(&limit, "limit", 0, "list at most this many (0: all)")
	return c
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func firstLine(s string) string { l, _, _ := strings.Cut(s, "\n"); return l }

func short(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

func (a *app) dlqShow() *cobra.Command {
	var f dlqFlags
	c := &cobra.Command{
		Use:     "show ID",
		Short:   "Show one dead letter with its headers and payload",
		Example: `  ferry dlq show --group inventory evt-42`,
		Args:    cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			t, closeT, err := a.open(c.Context())
			if err != nil {
				return err
			}
			defer closeT()
			name, err := ops.DLQOf(t, f.topic, f.group, f.dlq)
			if err != nil {
				return err
			}
			d, err := ops.ShowDeadLetter(c.Context(), t, name, args[0])
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.json(d)
			}
			w := a.out
			fmt.Fprintf(w, "ID:             %s\nKey:            %s\nOriginal topic: %s\nClass:          %s\nAttempts:       %d\nFirst failure:  %s\nLast failure:   %s\nReason:         %s\nHeaders:\n",
				d.ID, dash(d.Key), d.OriginalTopic, d.Class, d.Attempts, stamp(d.FirstFailure), stamp(d.LastFailure), firstLine(d.Reason))
			keys := make([]string, 0, len(d.Headers))
			for k := range d.Headers {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				fmt.Fprintf(w, "  %s: %s\n", k, strconv.Quote(d.Headers[k]))
			}
			fmt.Fprintf(w, "Payload (%d bytes):\n%s\n", len(d.Payload), d.Payload.Text())
			return nil
		},
	}
	f.add(c)
	return c
}

func (a *app) dlqReplay() *cobra.Command {
	var f dlqFlags
	var s selFlags
	var to string
	var dry bool
	c := &cobra.Command{
		Use:   "replay [ID...]",
		Short: "Republish dead letters to their original topic or another, removing each once confirmed",
		Long: `replay republishes the selected dead letters, keeping their IDs, and removes each
from the DLQ only once its publish is confirmed. It is at-least-once: replaying the
same selection twice is safe where the consumers dedupe (they apply each ID once).
Ctrl-C stops between messages: what was replayed stays replayed, the rest stays in the DLQ.`,
		Example: `  ferry dlq replay --group inventory evt-42 evt-43
  ferry dlq replay --group inventory --key order-7
  ferry dlq replay --group inventory --since 2h --dry-run
  ferry dlq replay --group inventory --all --to orders.retry`,
		RunE: func(c *cobra.Command, args []string) error {
			return a.replay(c, f, s, args, to, dry, false)
		},
	}
	f.add(c)
	s.add(c)
	c.Flags().StringVar(&to, "to", "", "publish to this topic instead of each message's original topic")
	c.Flags().BoolVar(&dry, "dry-run", false, "show what would be replayed and change nothing")
	return c
}

func (a *app) dlqPurge() *cobra.Command {
	var f dlqFlags
	var s selFlags
	var archive string
	var dry, yes bool
	c := &cobra.Command{
		Use:   "purge [ID...]",
		Short: "Remove dead letters from the DLQ, moving them to an archive topic",
		Long: `purge removes the selected dead letters from the DLQ by moving them to an archive
topic (the DLQ's name + ".purged" unless --archive) that nothing consumes. It asks for
confirmation unless --yes.`,
		Example: `  ferry dlq purge --group inventory --key order-7 --dry-run
  ferry dlq purge --group inventory --all --yes`,
		RunE: func(c *cobra.Command, args []string) error {
			if !dry && !yes {
				fmt.Fprint(a.errw, "Purge the selected dead letters? Type yes: ")
				var answer string
				_, _ = fmt.Fscanln(a.in, &answer)
				if answer != "yes" {
					return errors.New("purge not confirmed; nothing changed (use --yes to skip the question)")
				}
			}
			return a.replay(c, f, s, args, archive, dry, true)
		},
	}
	f.add(c)
	s.add(c)
	c.Flags().StringVar(&archive, "archive", "", "archive topic (default: the DLQ's name + .purged)")
	c.Flags().BoolVar(&dry, "dry-run", false, "show what would be purged and change nothing")
	c.Flags().BoolVar(&yes, "yes", false, "do not ask for confirmation")
	return c
}

func (a *app) replay(c *cobra.Command, f dlqFlags, s selFlags, ids []string, to string, dry, purge bool) error {
	sel, err := s.selection(ids)
	if err != nil {
		return err
	}
	t, closeT, err := a.open(c.Context())
	if err != nil {
		return err
	}
	defer closeT()
	name, err := ops.DLQOf(t, f.topic, f.group, f.dlq)
	if err != nil {
		return err
	}
	verb := "replayed"
	bar, done := a.progress("replaying")
	var res ops.ReplayResult
	if purge {
		verb = "purged"
		res, err = ops.PurgeDLQ(c.Context(), t, name, sel, to, dry, bar)
	} else {
		res, err = ops.ReplayDLQ(c.Context(), t, name, sel, to, dry, bar)
	}
	done()
	if err != nil && len(res.Selected) == 0 {
		return err // nothing selected: the error says why
	}
	if a.output == "json" {
		if jerr := a.json(res); jerr != nil {
			return jerr
		}
	} else {
		dest := to
		if dest == "" {
			dest = "their original topics"
		}
		if dry {
			fmt.Fprintf(a.out, "dry run: would have %s %d dead letters of %s to %s:\n", verb, len(res.Selected), name, dest)
			for _, d := range res.Selected {
				fmt.Fprintf(a.out, "  %s  key %s  %s\n", d.ID, dash(d.Key), short(firstLine(d.Reason), 60))
			}
		} else {
			fmt.Fprintf(a.out, "%s %d of %d dead letters of %s to %s\n", verb, res.Replayed, len(res.Selected), name, dest)
		}
	}
	return err
}
