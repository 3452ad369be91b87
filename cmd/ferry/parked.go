package main

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferrymq/ferry/cmd/ferry/internal/ops"
	"github.com/ferrymq/ferry/parking"
)

func (a *app) lot(c *cobra.Command) (*ops.Lot, error) {
	return ops.OpenLot(c.Context(), a.parking)
}

// operator names who asks, for the lot's records.
func operator() string {
	if u := os.Getenv("USER"); u != "" {
		return u + " (ferry)"
	}
	return "ferry"
}

func (a *app) parkedCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "parked",
		Short: "List, show, release and drop parked keys",
		Example: `  ferry parked ls --parking postgres://127.0.0.1:5432/app
  ferry parked release --subscription inventory order-7`,
	}
	c.AddCommand(a.parkedLs(), a.parkedShow(), a.parkedRelease(), a.parkedDrop(), a.parkedAudit())
	return c
}

func (a *app) parkedLs() *cobra.Command {
	var sub string
	c := &cobra.Command{
		Use:     "ls",
		Short:   "List parked keys per subscription with count, age of the oldest and reason",
		Example: `  ferry parked ls --parking redis://127.0.0.1:6379 --subscription inventory`,
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			lot, err := a.lot(c)
			if err != nil {
				return err
			}
			defer lot.Close()
			ks, err := ops.ListParked(c.Context(), lot, sub)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.json(ks)
			}
			rows := make([][]string, len(ks))
			for i, k := range ks {
				state := "parked"
				switch {
				case k.Releasing:
					state = "releasing"
				case !k.RequestedAt.IsZero():
					state = "release requested"
				}
				rows[i] = []string{k.Subscription, k.Key, strconv.Itoa(k.Count), k.Age.String(), state, short(firstLine(k.Reason), 60)}
			}
			a.table([]string{"SUBSCRIPTION", "KEY", "COUNT", "AGE", "STATE", "REASON"}, rows)
			return nil
		},
	}
	c.Flags().StringVar(&sub, "subscription", "", "the subscription (default: every subscription in the lot)")
	return c
}

func (a *app) parkedShow() *cobra.Command {
	var sub string
	var limit int
	c := &cobra.Command{
		Use:     "show KEY",
		Short:   "Show a parked key's failure and its messages in order",
		Example: `  ferry parked show --subscription inventory order-7`,
		Args:    cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			lot, err := a.lot(c)
			if err != nil {
				return err
			}
			defer lot.Close()
			d, err := ops.ShowParked(c.Context(), lot, sub, args[0], limit)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.json(d)
			}
			fmt.Fprintf(a.out, "Subscription: %s\nKey:          %s\nParked:       %s (%s ago)\nCount:        %d\nFirst:        %s\nReason:       %s (%s, %d attempts)\nFailed releases: %d\n",
				d.Subscription, d.Key, stamp(d.ParkedAt), d.Age, d.Count, d.FirstID, firstLine(d.Reason), d.Class, d.Attempts, d.FailedReleases)
			if d.LastFailure != "" {
				fmt.Fprintf(a.out, "Last failure: %s\n", firstLine(d.LastFailure))
			}
			rows := make([][]string, len(d.Messages))
			for i, m := range d.Messages {
				rows[i] = []string{strconv.FormatInt(m.Seq, 10), m.ID, m.Topic, stamp(m.ParkedAt), short(m.Payload.Text(), 50)}
			}
			a.table([]string{"SEQ", "ID", "TOPIC", "PARKED AT", "PAYLOAD"}, rows)
			return nil
		},
	}
	c.Flags().StringVar(&sub, "subscription", "", "the subscription (required)")
	c.Flags().IntVar(&limit, "limit", 0, "show at most this many messages (0: all)")
	return c
}

func (a *app) parkedRelease() *cobra.Command {
	var sub string
	var wait, dry bool
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "release KEY",
		Short: "Ask the running consumers to release a parked key in order, and follow it",
		Long: `release records a release request in the lot. The running consumers of the
subscription (their Park middleware) carry it out: one takes the key's lock and replays
its messages in order through the handler chain, then unparks the key. The command
follows the progress until the key is released or the release failed; Ctrl-C stops
following, not the release. With --wait=false it only asks.`,
		Example: `  ferry parked release --subscription inventory order-7
  ferry parked release --subscription inventory order-7 --wait=false`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			lot, err := a.lot(c)
			if err != nil {
				return err
			}
			defer lot.Close()
			if dry {
				d, err := ops.ShowParked(c.Context(), lot, sub, args[0], 0)
				if err != nil {
					return err
				}
				if a.output == "json" {
					return a.json(d)
				}
				fmt.Fprintf(a.out, "dry run: would ask to release %s on %s: %d messages, in order\n", d.Key, d.Subscription, d.Count)
				return nil
			}
			var p ops.ReleaseProgress
			if !wait {
				p, err = ops.RequestRelease(c.Context(), lot, sub, args[0], operator())
			} else {
				ctx := c.Context()
				if timeout > 0 {
					var cancel func()
					ctx, cancel = contextWithTimeout(ctx, timeout)
					defer cancel()
				}
				p, err = ops.WaitRelease(ctx, lot, sub, args[0], operator(), 100*time.Millisecond, func(p ops.ReleaseProgress) {
					if a.tty {
						fmt.Fprintf(a.errw, "\r\033[K%s: %d left", p.State, p.Left)
					}
				})
				if a.tty {
					fmt.Fprint(a.errw, "\r\033[K")
				}
			}
			if err != nil {
				return err
			}
			if a.output == "json" {
				if err := a.json(p); err != nil {
					return err
				}
			} else {
				switch p.State {
				case ops.ReleaseDone:
					fmt.Fprintf(a.out, "released %s on %s: every parked message replayed in order; the key flows again\n", p.Key, p.Subscription)
				case ops.ReleaseFailed:
					fmt.Fprintf(a.out, "release of %s on %s stopped: a replayed message failed again; %d messages stay parked: %s\n", p.Key, p.Subscription, p.Left, firstLine(p.LastFailure))
				default:
					fmt.Fprintf(a.out, "release of %s on %s requested (%s, %d messages parked); the running consumers carry it out\n", p.Key, p.Subscription, p.State, p.Left)
				}
			}
			if p.State == ops.ReleaseFailed {
				return fmt.Errorf("release of %s failed: %w", p.Key, parking.ErrReplayFailed)
			}
			return nil
		},
	}
	c.Flags().StringVar(&sub, "subscription", "", "the subscription (required)")
	c.Flags().BoolVar(&wait, "wait", true, "follow the release until it ends")
	c.Flags().DurationVar(&timeout, "timeout", 0, "stop following after this long (0: until done or Ctrl-C)")
	c.Flags().BoolVar(&dry, "dry-run", false, "show what would be released and ask nothing")
	return c
}

func (a *app) parkedDrop() *cobra.Command {
	var sub, reason string
	var dry, yes bool
	c := &cobra.Command{
		Use:     "drop KEY",
		Short:   "Discard a parked key's messages without replaying them, keeping an audit record",
		Example: `  ferry parked drop --subscription inventory order-7 --reason "order cancelled by support" --yes`,
		Args:    cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if !dry && !yes {
				fmt.Fprintf(a.errw, "Drop every parked message of %s? Type yes: ", args[0])
				var answer string
				_, _ = fmt.Fscanln(a.in, &answer)
				if answer != "yes" {
					return fmt.Errorf("drop not confirmed; nothing changed (use --yes to skip the question)")
				}
			}
			lot, err := a.lot(c)
			if err != nil {
				return err
			}
			defer lot.Close()
			d, err := ops.DropParked(c.Context(), lot, sub, args[0], parking.Audit{By: operator(), Reason: reason}, dry)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.json(d)
			}
			what := "dropped"
			if dry {
				what = "dry run: would drop"
			}
			fmt.Fprintf(a.out, "%s %s on %s: %d messages %v (audit: by %s: %s)\n", what, d.Key, d.Subscription, len(d.IDs), d.IDs, d.By, d.Why)
			return nil
		},
	}
	c.Flags().StringVar(&sub, "subscription", "", "the subscription (required)")
	c.Flags().StringVar(&reason, "reason", "", "why, for the audit record (required)")
	c.Flags().BoolVar(&dry, "dry-run", false, "show what would be dropped and change nothing")
	c.Flags().BoolVar(&yes, "yes", false, "do not ask for confirmation")
	return c
}

func (a *app) parkedAudit() *cobra.Command {
	var sub string
	c := &cobra.Command{
		Use:     "audit",
		Short:   "List the audit records of the keys dropped on a subscription, oldest first",
		Example: `  ferry parked audit --subscription inventory -o json`,
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if sub == "" {
				return usageError{fmt.Errorf("give --subscription")}
			}
			lot, err := a.lot(c)
			if err != nil {
				return err
			}
			defer lot.Close()
			ds, err := ops.Audits(c.Context(), lot, sub)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.json(ds)
			}
			rows := make([][]string, len(ds))
			for i, d := range ds {
				rows[i] = []string{stamp(d.DroppedAt), d.Key, strconv.Itoa(len(d.IDs)), d.By, d.Why}
			}
			a.table([]string{"DROPPED AT", "KEY", "MESSAGES", "BY", "REASON"}, rows)
			return nil
		},
	}
	c.Flags().StringVar(&sub, "subscription", "", "the subscription (required)")
	return c
}
