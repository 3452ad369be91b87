package ops

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/ferrymq/ferry/idempotency"
	"github.com/ferrymq/ferry/store/pgstore"
	"github.com/ferrymq/ferry/transport"
)

// Inbox is a dedupe records table opened by [OpenInbox], read only, with
// the connection it owns.
type Inbox struct {
	records *pgstore.Records
	close   func()
}

// Close closes the inbox's connection.
func (in *Inbox) Close() {
	if in != nil && in.close != nil {
		in.close()
	}
}

// OpenInbox opens the dedupe records that dsn names: postgres://… or
// postgresql://… (the table of pgstore's Inbox and Store; the query key
// "table" picks another than ferry_idempotency). It checks the connection
// within DefaultTimeout. The Redis store keeps one key per record and no
// index of them, so it cannot be summed up: a redis:// DSN is refused.
func OpenInbox(ctx context.Context, dsn string) (*Inbox, error) {
	if dsn == "" {
		return nil, fmt.Errorf("%w: no inbox: give --inbox (postgres://…)", ErrUsage)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot parse the inbox DSN", ErrUsage)
	}
	red := transport.RedactString(dsn)
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return nil, fmt.Errorf("%w: inbox %s: scheme %q: want postgres:// (the Redis store keeps no index of its records to read)", ErrUsage, red, u.Scheme)
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultTimeout)
	defer cancel()
	q := u.Query()
	table := q.Get("table")
	q.Del("table")
	u.RawQuery = q.Encode()
	var opts []pgstore.StoreOption
	if table != "" {
		opts = append(opts, pgstore.Table(table))
	}
	pool, err := openPool(ctx, "inbox", u, dsn)
	if err != nil {
		return nil, err
	}
	r, err := pgstore.NewRecords(pool, opts...)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("%w: inbox %s: %s", ErrUsage, red, err)
	}
	return &Inbox{records: r, close: pool.Close}, nil
}

// InboxNamespace is what an inbox holds for one namespace (one
// subscription's dedupe records).
type InboxNamespace struct {
	Namespace        string   `json:"namespace"`
	Done             int64    `json:"done"`        // completed keys still remembered
	DoneRecently     int64    `json:"done_recent"` // of those, claimed within the summary's Recent
	InProgress       int64    `json:"in_progress"` // lease-mode claims whose lease runs
	Abandoned        int64    `json:"abandoned"`   // lease-mode claims whose lease ended unsettled
	OldestInProgress Duration `json:"oldest_in_progress"`
}

// InboxClaim is a claim in progress for long, or abandoned.
type InboxClaim struct {
	Namespace string    `json:"namespace"`
	ID        string    `json:"id"`
	ClaimedAt time.Time `json:"claimed_at"`
	Age       Duration  `json:"age"`
	LeaseLeft Duration  `json:"lease_left"` // negative: the lease ended
}

// InboxSummary is [SummarizeInbox]'s answer.
type InboxSummary struct {
	Recent     Duration         `json:"recent"`
	StuckAfter Duration         `json:"stuck_after"`
	Namespaces []InboxNamespace `json:"namespaces"`
	Stuck      []InboxClaim     `json:"stuck"`
}

// SummarizeInbox counts in's records per namespace (DoneRecently over the
// last recent) and lists up to limit claims in progress for stuckAfter or
// more, or abandoned, oldest first. It reads the whole table: call it when
// asked. An inbox's transactional claims in progress are uncommitted rows
// and do not show ([pgstore.Records]).
func SummarizeInbox(ctx context.Context, in *Inbox, recent, stuckAfter time.Duration, limit int) (InboxSummary, error) {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	out := InboxSummary{Recent: Duration(recent), StuckAfter: Duration(stuckAfter), Namespaces: []InboxNamespace{}, Stuck: []InboxClaim{}}
	counts, err := in.records.Counts(ctx, recent)
	if err != nil {
		return out, fmt.Errorf("inbox: %w", err)
	}
	for _, c := range counts {
		out.Namespaces = append(out.Namespaces, InboxNamespace{Namespace: c.Namespace, Done: c.Done, DoneRecently: c.DoneRecently,
			InProgress: c.InProgress, Abandoned: c.Abandoned, OldestInProgress: Duration(c.OldestInProgress)})
	}
	stuck, err := in.records.Stuck(ctx, stuckAfter, limit)
	if err != nil {
		return out, fmt.Errorf("inbox: %w", err)
	}
	for _, s := range stuck {
		out.Stuck = append(out.Stuck, InboxClaim{Namespace: s.Namespace, ID: s.Key, ClaimedAt: s.ClaimedAt,
			Age: Duration(s.Age), LeaseLeft: Duration(s.LeaseLeft)})
	}
	return out, nil
}

// InboxRecord is what an inbox knows of one message ID.
type InboxRecord struct {
	Namespace string `json:"namespace"`
	ID        string `json:"id"`
	// State is "done" (processed: a duplicate is skipped), "in-progress"
	// (claimed, lease running), "abandoned" (claimed, lease ended
	// unsettled: it will be handled again), "expired" (processed, but
	// remembered no longer: a duplicate would be handled again) or
	// "unknown" (no record: never processed, released after a failure,
	// rolled back, or cleaned up).
	State      string    `json:"state"`
	ClaimedAt  time.Time `json:"claimed_at,omitzero"`
	Age        Duration  `json:"age"`
	Until      time.Time `json:"until,omitzero"` // end of the lease, or of the record's memory
	ResultSize int       `json:"result_size"`
}

// LookupInbox tells whether message id was processed in namespace (the
// dedupe key is the message ID unless the subscription's DedupeKey
// chose another).
func LookupInbox(ctx context.Context, in *Inbox, namespace, id string) (InboxRecord, error) {
	if id == "" {
		return InboxRecord{}, fmt.Errorf("%w: give the message ID to look up", ErrUsage)
	}
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	r, err := in.records.Lookup(ctx, namespace, id)
	if err != nil {
		return InboxRecord{}, fmt.Errorf("inbox: %w", err)
	}
	out := InboxRecord{Namespace: namespace, ID: id, State: "unknown"}
	if r.State == 0 {
		return out, nil
	}
	out.ClaimedAt, out.Age, out.Until, out.ResultSize = r.ClaimedAt, Duration(r.Age), r.Until, r.ResultSize
	switch {
	case r.State == idempotency.Done && r.Expired:
		out.State = "expired"
	case r.Expired:
		out.State = "abandoned"
	default:
		out.State = r.State.String()
	}
	return out, nil
}
