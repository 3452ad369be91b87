package ops

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/ferrymq/ferry/dlq"
	"github.com/ferrymq/ferry/transport"
)

// DeadLetter is one dead letter as an operator sees it.
type DeadLetter struct {
	ID            string            `json:"id"`
	Key           string            `json:"key"`
	Reason        string            `json:"reason"`
	Class         string            `json:"class"`
	Attempts      int               `json:"attempts"`
	FirstFailure  time.Time         `json:"first_failure"`
	LastFailure   time.Time         `json:"last_failure"`
	Age           Duration          `json:"age"`
	OriginalTopic string            `json:"original_topic"`
	Subscription  string            `json:"subscription,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
	Payload       Payload           `json:"payload"`
}

// Duration is a time.Duration that marshals to JSON as seconds.
type Duration time.Duration

// MarshalJSON writes d in seconds, with millisecond precision.
func (d Duration) MarshalJSON() ([]byte, error) {
	return fmt.Appendf(nil, "%.3f", time.Duration(d).Seconds()), nil
}

// UnmarshalJSON reads seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s float64
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*d = Duration(s * float64(time.Second))
	return nil
}

// String rounds d for a table: 3s, 4m10s, 2h5m.
func (d Duration) String() string {
	t := time.Duration(d)
	switch {
	case t <= 0:
		return "-"
	case t < time.Minute:
		return t.Round(time.Second).String()
	case t < time.Hour:
		return t.Round(time.Second).String()
	}
	return t.Round(time.Minute).String()
}

// Payload is a message payload printed safely: as text when it is valid
// UTF-8 without control characters (newline and tab allowed), else as
// base64 (JSON) or hex (Text).
type Payload []byte

// IsText reports whether p prints as it is.
func (p Payload) IsText() bool {
	if !utf8.Valid(p) {
		return false
	}
	for _, r := range string(p) {
		if r < 0x20 && r != '\n' && r != '\t' && r != '\r' || r == 0x7f {
			return false
		}
	}
	return true
}

// Text is p as text, or "hex:" and its hex digits.
func (p Payload) Text() string {
	if p.IsText() {
		return string(p)
	}
	return fmt.Sprintf("hex:%x", []byte(p))
}

// MarshalJSON writes {"text": …} or {"base64": …}.
func (p Payload) MarshalJSON() ([]byte, error) {
	return json.Marshal(p.view())
}

// view is what MarshalJSON writes.
func (p Payload) view() any {
	type text struct {
		Text string `json:"text"`
	}
	type bin struct {
		Base64 []byte `json:"base64"`
	}
	if p.IsText() {
		return text{string(p)}
	}
	return bin{p}
}

func deadLetterOf(e dlq.Entry, now time.Time) DeadLetter {
	m, r := e.Message, e.Record
	d := DeadLetter{ID: m.ID, Key: m.Key, Reason: r.Error, Class: r.Class, Attempts: r.Attempts,
		FirstFailure: r.FirstFailure, LastFailure: r.LastFailure, OriginalTopic: r.OriginalTopic,
		Subscription: r.Subscription, Headers: m.Headers, Payload: Payload(m.Payload)}
	if !r.FirstFailure.IsZero() {
		d.Age = Duration(now.Sub(r.FirstFailure))
	}
	return d
}

// DLQOf returns the DLQ name of group on topic for t ([transport.DLQName]):
// dlqName if it is not empty, else the group's.
func DLQOf(t transport.Transport, topic, group, dlqName string) (string, error) {
	if dlqName != "" {
		return dlqName, nil
	}
	if group == "" && topic == "" {
		return "", fmt.Errorf("%w: name the DLQ: give --group (and --topic) or --dlq", ErrUsage)
	}
	if topic == "" {
		topic = group // where a queue is its one group (SQS), the group names it
	}
	return transport.DLQName(t, transport.Subscription{Topic: topic, Group: group}), nil
}

func deadLetters(t transport.Transport) (transport.DeadLetters, error) {
	d, err := dlq.Of(t)
	if err != nil {
		return nil, fmt.Errorf("this transport has no DLQ operations: %w", err)
	}
	return d, nil
}

// ListDLQ returns up to limit (0: all) dead letters of the DLQ named name,
// oldest first, without removing them.
func ListDLQ(ctx context.Context, t transport.Transport, name string, limit int) ([]DeadLetter, error) {
	d, err := deadLetters(t)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	es, err := dlq.List(ctx, d, name, limit)
	if err != nil {
		return nil, fmt.Errorf("list DLQ %s: %w", name, err)
	}
	now := time.Now()
	out := make([]DeadLetter, len(es))
	for i, e := range es {
		out[i] = deadLetterOf(e, now)
	}
	return out, nil
}

// ShowDeadLetter returns the dead letter with id in the DLQ named name, or
// an error wrapping [ErrNotInDLQ].
func ShowDeadLetter(ctx context.Context, t transport.Transport, name, id string) (DeadLetter, error) {
	all, err := ListDLQ(ctx, t, name, 0)
	if err != nil {
		return DeadLetter{}, err
	}
	for _, d := range all {
		if d.ID == id {
			return d, nil
		}
	}
	return DeadLetter{}, fmt.Errorf("message %q: %w %s", id, ErrNotInDLQ, name)
}

// Selection selects dead letters: by ID, by key, by the time of their
// first failure, or all. Fields combine: a message is selected when it
// matches IDs or Keys (if either is given) and lies in [Since, Until) (if
// given).
type Selection struct {
	IDs   []string
	Keys  []string
	Since time.Time
	Until time.Time
	All   bool
}

// Empty reports whether s selects by nothing; replaying or purging then
// needs All.
func (s Selection) Empty() bool {
	return len(s.IDs) == 0 && len(s.Keys) == 0 && s.Since.IsZero() && s.Until.IsZero()
}

// Matches reports whether s selects d.
func (s Selection) Matches(d DeadLetter) bool {
	if len(s.IDs) > 0 || len(s.Keys) > 0 {
		if !slices.Contains(s.IDs, d.ID) && !slices.Contains(s.Keys, d.Key) {
			return false
		}
	}
	at := d.FirstFailure
	if !s.Since.IsZero() && (at.IsZero() || at.Before(s.Since)) {
		return false
	}
	if !s.Until.IsZero() && (at.IsZero() || !at.Before(s.Until)) {
		return false
	}
	return true
}

// Select returns the dead letters of the DLQ named name that s selects,
// oldest first. An empty selection without All is an error wrapping
// [ErrUsage]; an ID that is not in the DLQ is an error wrapping
// [ErrNotInDLQ].
func Select(ctx context.Context, t transport.Transport, name string, s Selection) ([]DeadLetter, error) {
	if s.Empty() && !s.All {
		return nil, fmt.Errorf("%w: select what to act on: IDs, --key, --since/--until, or --all", ErrUsage)
	}
	all, err := ListDLQ(ctx, t, name, 0)
	if err != nil {
		return nil, err
	}
	var out []DeadLetter
	found := map[string]bool{}
	for _, d := range all {
		if s.Matches(d) {
			out = append(out, d)
			found[d.ID] = true
		}
	}
	for _, id := range s.IDs {
		if !found[id] {
			return nil, fmt.Errorf("message %q: %w %s", id, ErrNotInDLQ, name)
		}
	}
	return out, nil
}

// Progress is told how many of total messages are done so far.
type Progress func(done, total int)

// ReplayResult says what a replay did.
type ReplayResult struct {
	DLQ      string       `json:"dlq"`
	Selected []DeadLetter `json:"selected"`
	Replayed int          `json:"replayed"`
	To       string       `json:"to,omitempty"` // empty: each to its original topic
	DryRun   bool         `json:"dry_run"`
}

// ReplayDLQ republishes the selected dead letters of the DLQ named name to
// to (empty: each one's original topic), one at a time, each removed from
// the DLQ only once its publish is confirmed ([transport.DeadLetters]).
// With dryRun it only selects. When ctx ends, it stops between messages:
// those replayed stay replayed, the rest stay in the DLQ, and the result
// says how many; replaying the same selection again is safe where the
// consumers dedupe (the IDs are kept).
func ReplayDLQ(ctx context.Context, t transport.Transport, name string, s Selection, to string, dryRun bool, progress Progress) (ReplayResult, error) {
	res := ReplayResult{DLQ: name, To: to, DryRun: dryRun}
	sel, err := Select(ctx, t, name, s)
	if err != nil {
		return res, err
	}
	res.Selected = sel
	if dryRun {
		return res, nil
	}
	d, err := deadLetters(t)
	if err != nil {
		return res, err
	}
	for i, m := range sel {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("replay %s: stopped after %d of %d: %w", name, res.Replayed, len(sel), err)
		}
		cctx, cancel := context.WithTimeout(ctx, CallTimeout)
		n, err := d.ReplayDLQ(cctx, name, transport.Replay{IDs: []string{m.ID}, To: to, Limit: 1})
		cancel()
		res.Replayed += n
		if err != nil {
			return res, fmt.Errorf("replay %s: message %q (after %d of %d): %w", name, m.ID, res.Replayed, len(sel), err)
		}
		if progress != nil {
			progress(i+1, len(sel))
		}
	}
	return res, nil
}

// PurgeSuffix is appended to a DLQ's name to make the archive topic
// [PurgeDLQ] moves dead letters to, unless told another.
const PurgeSuffix = ".purged"

// PurgeDLQ removes the selected dead letters from the DLQ named name by
// moving them to the archive topic archive (default name+PurgeSuffix),
// where nothing consumes them: the transports' DLQ operations remove a
// dead letter only once it is safely published elsewhere, so a purge
// never loses what it was not asked to. On a broker that drops messages
// published where nobody listens (RabbitMQ, MQTT without a retained
// subscriber), the archive keeps nothing. Like [ReplayDLQ] it is
// interruptible between messages.
func PurgeDLQ(ctx context.Context, t transport.Transport, name string, s Selection, archive string, dryRun bool, progress Progress) (ReplayResult, error) {
	if archive == "" {
		archive = name + PurgeSuffix
	}
	return ReplayDLQ(ctx, t, name, s, archive, dryRun, progress)
}
