package ops

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ferrymq/ferry/transport"
)

// SemanticsRow is one transport configuration's declared
// [transport.Semantics], as the table prints it.
type SemanticsRow struct {
	Config          string `json:"config"` // the URL (redacted) or the variant's label
	Transport       string `json:"transport"`
	Ordering        string `json:"ordering"`
	OrderingHint    string `json:"ordering_hint,omitempty"`
	Ack             string `json:"ack"`
	Redelivery      string `json:"redelivery"`
	NackDelay       bool   `json:"nack_delay"`
	Attempts        bool   `json:"broker_attempts"`
	Extend          bool   `json:"extend"`
	NativeDLQ       bool   `json:"native_dlq"`
	FanOut          bool   `json:"fan_out"`
	Replay          bool   `json:"replay"`
	Headers         bool   `json:"headers"`
	MaxPayload      int    `json:"max_payload"`
	RedeliveryDelay string `json:"redelivery_delay"`
	// Delay is the transport's delayed publish ([transport.DelayPublisher]),
	// nil where it has none (package schedule delays for it).
	Delay *DelayRow `json:"delay,omitempty"`
	// ProvedBy names the conformance test that proves the row, in the
	// generated table of the docs.
	ProvedBy string `json:"proved_by,omitempty"`
}

// DelayRow is a [transport.DelaySemantics], as the table prints it.
type DelayRow struct {
	Max       string `json:"max"` // "no limit" for 0
	Precision string `json:"precision"`
	Mechanism string `json:"mechanism"`
	Durable   bool   `json:"durable"`
}

// DelayOf turns ds into a row's delay columns.
func DelayOf(ds transport.DelaySemantics) *DelayRow {
	maxd := "no limit"
	if ds.Max > 0 {
		maxd = ds.Max.String()
	}
	return &DelayRow{Max: maxd, Precision: ds.Precision.String(), Mechanism: ds.Mechanism, Durable: ds.Durable}
}

// RowOf turns sem into a row labelled config.
func RowOf(config string, sem transport.Semantics) SemanticsRow {
	return SemanticsRow{Config: config, Transport: sem.Transport, Ordering: sem.Ordering.String(), OrderingHint: sem.OrderingHint,
		Ack: sem.Ack.String(), Redelivery: sem.Redelivery.String(), NackDelay: sem.NackDelay, Attempts: sem.Attempts,
		Extend: sem.Extend, NativeDLQ: sem.NativeDLQ, FanOut: sem.FanOut, Replay: sem.Replay, Headers: sem.Headers,
		MaxPayload: sem.MaxPayload, RedeliveryDelay: sem.RedeliveryDelay.Round(time.Millisecond).String()}
}

// Declared returns what a subscription to topic by group on t declares,
// with the URL's options applied: the [transport.Declarer] answer, without
// touching the broker.
func Declared(t transport.Transport, config, topic, group string) (SemanticsRow, error) {
	d, ok := t.(transport.Declarer)
	if !ok {
		return SemanticsRow{}, fmt.Errorf("%T declares no semantics", t)
	}
	if topic == "" {
		topic = "orders"
	}
	if group == "" {
		group = "ferry-semantics"
	}
	sem, err := d.Declare(transport.Subscription{Topic: topic, Group: group})
	if err != nil {
		return SemanticsRow{}, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	r := RowOf(config, sem)
	if dp, ok := t.(transport.DelayPublisher); ok {
		r.Delay = DelayOf(dp.DelaySemantics())
	}
	return r, nil
}

// DeclaredURL opens rawURL and returns its declared semantics.
func DeclaredURL(ctx context.Context, rawURL, topic, group string) (SemanticsRow, error) {
	t, err := Open(ctx, rawURL)
	if err != nil {
		return SemanticsRow{}, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = t.Close(cctx)
	}()
	label := transport.RedactString(rawURL)
	if u, err := url.Parse(rawURL); err == nil && u.RawQuery != "" {
		var keys []string
		for k := range u.Query() {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		label += " (options: " + strings.Join(keys, ", ") + ")" // values may be secrets
	}
	return Declared(t, label, topic, group)
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// Markdown renders rows as the table of docs/transports/README.md.
func Markdown(rows []SemanticsRow) string {
	var b strings.Builder
	b.WriteString("| configuration | Ordering | Ack | Redelivery | NackDelay | Broker attempts | Extend | NativeDLQ | FanOut | Replay | Headers | MaxPayload | Delay: longest | Delay: precision | Delay: mechanism | proved by |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		maxp := "-"
		if r.MaxPayload > 0 {
			maxp = strconv.Itoa(r.MaxPayload)
		}
		proved := r.ProvedBy
		if proved == "" {
			proved = "-"
		}
		dmax, dprec, dmech := "-", "-", "none (package schedule)"
		if d := r.Delay; d != nil {
			dmax, dprec, dmech = d.Max, d.Precision, d.Mechanism
			if !d.Durable {
				dmech += " (not durable)"
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Config, r.Ordering, r.Ack, r.Redelivery,
			yes(r.NackDelay), yes(r.Attempts), yes(r.Extend), yes(r.NativeDLQ), yes(r.FanOut), yes(r.Replay), yes(r.Headers), maxp, dmax, dprec, dmech, proved)
	}
	return b.String()
}
