package console

import (
	"context"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/ferrymq/ferry/cmd/ferry/internal/ops"
	"github.com/ferrymq/ferry/parking"
	"github.com/ferrymq/ferry/transport"
)

//go:embed static
var staticFS embed.FS

// maxBody bounds a write request's body.
const maxBody = 64 << 10

// dlqLimit bounds how many dead letters a listing returns.
const dlqLimit = 500

func (s *Server) routes() {
	static, _ := fs.Sub(staticFS, "static")
	files := http.FileServerFS(static)
	s.mux = http.NewServeMux()
	s.mux.Handle("GET /{$}", files)
	s.mux.Handle("GET /app.js", files)
	s.mux.Handle("GET /app.css", files)
	s.mux.HandleFunc("GET /api/session", s.session)
	s.mux.HandleFunc("GET /api/overview", s.overview)
	s.mux.HandleFunc("GET /api/dlq", s.listDLQ)
	s.mux.HandleFunc("/api/dlq/replay", s.write(s.replay))
	s.mux.HandleFunc("GET /api/parked", s.listParked)
	s.mux.HandleFunc("GET /api/parked/messages", s.parkedMessages)
	s.mux.HandleFunc("/api/parked/release", s.write(s.release))
	s.mux.HandleFunc("/api/parked/drop", s.write(s.drop))
	s.mux.HandleFunc("GET /api/inbox", s.inboxSummary)
	s.mux.HandleFunc("GET /api/inbox/lookup", s.inboxLookup)
}

// errNoInbox answers the inbox requests without an inbox.
const errNoInbox = "console: no inbox (start with --inbox)"

func (s *Server) inboxSummary(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Inbox == nil {
		writeError(w, http.StatusNotFound, errNoInbox)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()
	sum, err := s.cfg.Inbox.Summary(ctx)
	if err != nil {
		writeError(w, http.StatusBadGateway, s.clean(err))
		return
	}
	writeJSON(w, sum)
}

func (s *Server) inboxLookup(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Inbox == nil {
		writeError(w, http.StatusNotFound, errNoInbox)
		return
	}
	q := r.URL.Query()
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()
	rec, err := s.cfg.Inbox.Lookup(ctx, q.Get("namespace"), q.Get("id"))
	if err != nil {
		writeError(w, codeOf(err), s.clean(err))
		return
	}
	writeJSON(w, rec)
}

// write wraps a write action: the checks of checkWrite, a bounded body
// decoded into the action's request, and the operation's deadline.
func (s *Server) write(action func(ctx context.Context, body json.RawMessage) (any, int, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.checkWrite(w, r) {
			return
		}
		var body json.RawMessage
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&body); err != nil {
			writeError(w, http.StatusBadRequest, "console: bad request body: "+err.Error())
			return
		}
		// A write may replay many messages one by one: it gets six
		// operation timeouts (a minute by default); what it did by then
		// stays done, and the error says how far it got.
		ctx, cancel := context.WithTimeout(r.Context(), 6*s.cfg.Timeout)
		defer cancel()
		out, code, err := action(ctx, body)
		if err != nil {
			s.log.Warn("console: write action failed", "path", r.URL.Path, "err", s.clean(err))
			writeError(w, code, s.clean(err))
			return
		}
		s.log.Info("console: write action", "path", r.URL.Path, "remote", r.RemoteAddr)
		writeJSON(w, out)
	}
}

type sessionJSON struct {
	CSRF         string `json:"csrf"`
	URL          string `json:"url"`
	Loopback     bool   `json:"loopback"`
	Writable     bool   `json:"writable"`
	NeedsToken   bool   `json:"needsToken"`
	DeadLetters  bool   `json:"deadLetters"`
	Parking      bool   `json:"parking"`
	Inbox        bool   `json:"inbox"`
	IntervalMS   int64  `json:"intervalMs"`
	HistorySecs  int64  `json:"historySeconds"`
	ServerTimeMS int64  `json:"serverTimeMs"`
}

func (s *Server) session(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, sessionJSON{
		CSRF:         s.csrf,
		URL:          s.cfg.URL,
		Loopback:     s.loopback,
		Writable:     s.Writable(),
		NeedsToken:   s.cfg.Token != "",
		DeadLetters:  s.cfg.DeadLetters != nil,
		Parking:      s.cfg.Lot != nil,
		Inbox:        s.cfg.Inbox != nil,
		IntervalMS:   s.cfg.Interval.Milliseconds(),
		HistorySecs:  int64(s.cfg.History / time.Second),
		ServerTimeMS: time.Now().UnixMilli(),
	})
}

type pointJSON struct {
	T    int64    `json:"t"`              // unix ms
	Lag  *int64   `json:"lag,omitempty"`  // messages, where known
	Age  float64  `json:"age"`            // seconds
	Rate *float64 `json:"rate,omitempty"` // messages per second consumed, where known
	Err  string   `json:"err,omitempty"`
}

type lagJSON struct {
	Partition string  `json:"partition"`
	Messages  int64   `json:"messages"`
	Age       float64 `json:"age"`
}

// windowJSON is what a group consumed over the last readings: from its
// first to its last reading with a count, within the window asked for.
type windowJSON struct {
	Seconds  float64  `json:"seconds"`  // the window asked for
	Messages *int64   `json:"messages"` // consumed in it; null where the broker counts nothing
	Spanned  float64  `json:"spanned"`  // seconds between the first and the last reading counted
	Rate     *float64 `json:"rate"`     // Messages / Spanned
}

type measureJSON struct {
	Lag        string `json:"lag"`
	Throughput string `json:"throughput"`
	Counts     bool   `json:"counts"`
}

type groupJSON struct {
	Name      string         `json:"name"`
	Topic     string         `json:"topic"`
	Group     string         `json:"group"`
	DLQ       string         `json:"dlq"`
	Lag       []lagJSON      `json:"lag"`
	Series    []pointJSON    `json:"series"`
	Windows   []windowJSON   `json:"windows"`
	Measure   measureJSON    `json:"measure"`
	Semantics *semanticsJSON `json:"semantics,omitempty"`
	Error     string         `json:"error,omitempty"`
}

type overviewJSON struct {
	Groups []groupJSON `json:"groups"`
	Error  string      `json:"error,omitempty"`
}

func (s *Server) overview(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	s.mu.Lock()
	groups := append([]Group(nil), s.groups...)
	out := overviewJSON{Error: s.lastErr, Groups: []groupJSON{}}
	for _, g := range groups {
		gj := groupJSON{Name: g.Name, Topic: g.Sub.Topic, Group: g.Sub.Group, DLQ: g.DLQ, Lag: []lagJSON{}, Series: []pointJSON{},
			Windows: []windowJSON{}, Measure: measureJSON{Lag: g.Measure.Lag, Throughput: g.Measure.Throughput, Counts: g.Measure.Counts}}
		if sr := s.series[g.Name]; sr != nil {
			for _, l := range sr.last.Lag {
				gj.Lag = append(gj.Lag, lagJSON{Partition: l.Partition, Messages: l.Messages, Age: l.OldestAge.Seconds()})
			}
			all := sr.since(time.Time{})
			for i, p := range all {
				pj := pointJSON{T: p.At.UnixMilli(), Age: p.Age.Seconds(), Err: p.Err}
				if p.Lag >= 0 {
					pj.Lag = &p.Lag
				}
				if i > 0 {
					if m, secs, ok := window(all[i-1 : i+1]); ok && secs > 0 {
						rate := float64(m) / secs
						pj.Rate = &rate
					}
				}
				gj.Series = append(gj.Series, pj)
			}
			// What the group consumed in the last minute, the last five,
			// and the whole history held.
			for _, d := range []time.Duration{time.Minute, 5 * time.Minute, s.cfg.History} {
				wj := windowJSON{Seconds: d.Seconds()}
				if m, secs, ok := window(sr.since(now.Add(-d))); ok {
					wj.Messages, wj.Spanned = &m, secs
					if secs > 0 {
						rate := float64(m) / secs
						wj.Rate = &rate
					}
				}
				gj.Windows = append(gj.Windows, wj)
			}
			if len(all) > 0 {
				gj.Error = all[len(all)-1].Err
			}
		}
		out.Groups = append(out.Groups, gj)
	}
	s.mu.Unlock()
	for i, g := range groups {
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
		sem, err := s.cfg.Monitor.Semantics(ctx, g)
		cancel()
		if err == nil {
			sj := semanticsOf(sem)
			out.Groups[i].Semantics = &sj
		}
	}
	writeJSON(w, out)
}

// semanticsJSON is the semantics row of [ops.Declared], field by field.
type semanticsJSON struct {
	Transport       string `json:"transport"`
	Ordering        string `json:"ordering"`
	OrderingHint    string `json:"orderingHint,omitempty"`
	Ack             string `json:"ack"`
	Redelivery      string `json:"redelivery"`
	NackDelay       bool   `json:"nackDelay"`
	Attempts        bool   `json:"attempts"`
	Extend          bool   `json:"extend"`
	NativeDLQ       bool   `json:"nativeDLQ"`
	FanOut          bool   `json:"fanOut"`
	Replay          bool   `json:"replay"`
	Headers         bool   `json:"headers"`
	MaxPayload      int    `json:"maxPayload"`
	RedeliveryDelay string `json:"redeliveryDelay"`
}

func semanticsOf(m ops.SemanticsRow) semanticsJSON {
	return semanticsJSON{
		Transport: m.Transport, Ordering: m.Ordering, OrderingHint: m.OrderingHint,
		Ack: m.Ack, Redelivery: m.Redelivery, NackDelay: m.NackDelay,
		Attempts: m.Attempts, Extend: m.Extend, NativeDLQ: m.NativeDLQ, FanOut: m.FanOut,
		Replay: m.Replay, Headers: m.Headers, MaxPayload: m.MaxPayload,
		RedeliveryDelay: m.RedeliveryDelay,
	}
}

// group finds the group named name among those last read.
func (s *Server) group(name string) (Group, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.groups {
		if g.Name == name {
			return g, true
		}
	}
	return Group{}, false
}

type messageJSON struct {
	ID       string      `json:"id"`
	Key      string      `json:"key"`
	Topic    string      `json:"topic"`
	Headers  [][2]string `json:"headers"`
	Payload  string      `json:"payload"`
	Encoding string      `json:"encoding"` // "text" or "base64"
	Size     int         `json:"size"`
}

// messageOf is a message as the page shows it: its headers sorted, its
// payload as text where it is text ([ops.Payload.IsText]), else base64.
func messageOf(id, key, topic string, headers map[string]string, p ops.Payload) messageJSON {
	mj := messageJSON{ID: id, Key: key, Topic: topic, Headers: [][2]string{}, Size: len(p)}
	keys := make([]string, 0, len(headers))
	for k := range headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		mj.Headers = append(mj.Headers, [2]string{k, headers[k]})
	}
	if p.IsText() {
		mj.Payload, mj.Encoding = string(p), "text"
	} else {
		mj.Payload, mj.Encoding = base64.StdEncoding.EncodeToString(p), "base64"
	}
	return mj
}

type deadLetterJSON struct {
	messageJSON
	Reason       string  `json:"reason"`
	Class        string  `json:"class"`
	Attempts     int     `json:"attempts"`
	Subscription string  `json:"subscription"`
	Original     string  `json:"originalTopic"`
	FirstFailure string  `json:"firstFailure,omitempty"`
	LastFailure  string  `json:"lastFailure,omitempty"`
	Age          float64 `json:"age"` // seconds since the first failure; -1 unknown
}

func (s *Server) listDLQ(w http.ResponseWriter, r *http.Request) {
	if s.cfg.DeadLetters == nil {
		writeError(w, http.StatusNotFound, "console: no DLQ operations for this transport")
		return
	}
	g, ok := s.group(r.URL.Query().Get("group"))
	if !ok {
		writeError(w, http.StatusNotFound, "console: no such group")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()
	entries, err := s.cfg.DeadLetters.List(ctx, g, dlqLimit)
	if err != nil && !errors.Is(err, transport.ErrNotFound) {
		writeError(w, http.StatusBadGateway, s.clean(err))
		return
	}
	out := struct {
		Group   string           `json:"group"`
		DLQ     string           `json:"dlq"`
		Letters []deadLetterJSON `json:"letters"`
		Limit   int              `json:"limit"`
	}{Group: g.Name, DLQ: g.DLQ, Letters: []deadLetterJSON{}, Limit: dlqLimit}
	for _, e := range entries {
		out.Letters = append(out.Letters, deadLetterOf(e))
	}
	writeJSON(w, out)
}

// msTime is RFC 3339 with milliseconds: a dead letter's first failure to
// the precision a time range selects it by.
const msTime = "2006-01-02T15:04:05.000Z07:00"

func deadLetterOf(e ops.DeadLetter) deadLetterJSON {
	d := deadLetterJSON{
		messageJSON: messageOf(e.ID, e.Key, e.OriginalTopic, e.Headers, e.Payload), Reason: e.Reason, Class: e.Class,
		Attempts: e.Attempts, Subscription: e.Subscription, Original: e.OriginalTopic, Age: -1,
	}
	if !e.FirstFailure.IsZero() {
		d.FirstFailure = e.FirstFailure.UTC().Format(msTime)
		d.Age = time.Duration(e.Age).Seconds()
	}
	if !e.LastFailure.IsZero() {
		d.LastFailure = e.LastFailure.UTC().Format(time.RFC3339)
	}
	return d
}

// replayRequest selects dead letters of a group to replay: by ID, by key,
// by the time of their first failure in [Since, Until) (RFC 3339; either
// may be empty), combined as [ops.Selection] combines them. An empty
// selection replays nothing unless All is set, so that a bug in the page
// cannot replay a whole DLQ.
type replayRequest struct {
	Group string   `json:"group"`
	IDs   []string `json:"ids"`
	Keys  []string `json:"keys"`
	Since string   `json:"since"`
	Until string   `json:"until"`
	All   bool     `json:"all"`
}

// selection is the ops.Selection r asks for, or an error naming the bad
// time.
func (r replayRequest) selection() (ops.Selection, error) {
	sel := ops.Selection{IDs: r.IDs, Keys: r.Keys, All: r.All}
	for _, f := range []struct {
		name, v string
		to      *time.Time
	}{{"since", r.Since, &sel.Since}, {"until", r.Until, &sel.Until}} {
		if f.v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, f.v)
		if err != nil {
			return sel, fmt.Errorf("console: %s %q: want an RFC 3339 time, such as 2026-12-01T08:00:00Z", f.name, f.v)
		}
		*f.to = t
	}
	if !sel.Since.IsZero() && !sel.Until.IsZero() && !sel.Since.Before(sel.Until) {
		return sel, fmt.Errorf("console: since %s is not before until %s", r.Since, r.Until)
	}
	return sel, nil
}

func (s *Server) replay(ctx context.Context, body json.RawMessage) (any, int, error) {
	if s.cfg.DeadLetters == nil {
		return nil, http.StatusNotFound, errors.New("console: no DLQ operations for this transport")
	}
	var req replayRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, http.StatusBadRequest, err
	}
	g, ok := s.group(req.Group)
	if !ok {
		return nil, http.StatusNotFound, errors.New("console: no such group")
	}
	sel, err := req.selection()
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	if sel.Empty() && !sel.All {
		return nil, http.StatusBadRequest, errors.New("console: nothing selected to replay")
	}
	res, err := s.cfg.DeadLetters.Replay(ctx, g, sel)

	if err != nil {
		code := http.StatusBadGateway
		if errors.Is(err, ops.ErrNotInDLQ) {
			code = http.StatusNotFound
		}
		if res.Replayed > 0 {
			err = fmt.Errorf("%w (%d replayed before it)", err, res.Replayed)
		}
		return nil, code, err
	}
	return map[string]any{"replayed": res.Replayed, "selected": len(res.Selected)}, 0, nil
}

type keyJSON struct {
	Subscription   string  `json:"subscription"`
	Key            string  `json:"key"`
	Count          int     `json:"count"`
	FirstID        string  `json:"firstId"`
	Reason         string  `json:"reason"`
	Class          string  `json:"class"`
	ParkedAt       string  `json:"parkedAt"`
	Age            float64 `json:"age"`
	Releasing      bool    `json:"releasing"`
	LastFailure    string  `json:"lastFailure,omitempty"`
	FailedReleases int     `json:"failedReleases"`
	RequestedBy    string  `json:"requestedBy,omitempty"`
	RequestedAge   float64 `json:"requestedAge,omitempty"` // seconds since the release request
}

type auditJSON struct {
	Subscription string   `json:"subscription"`
	Key          string   `json:"key"`
	IDs          []string `json:"ids"`
	By           string   `json:"by"`
	Reason       string   `json:"reason"`
	Failure      string   `json:"failure"`
	DroppedAt    string   `json:"droppedAt"`
}

func (s *Server) listParked(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Lot == nil {
		writeError(w, http.StatusNotFound, errNoLot.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()
	keys, err := s.cfg.Lot.Parked(ctx)
	if err != nil {
		writeError(w, http.StatusBadGateway, s.clean(err))
		return
	}
	now := time.Now()
	out := struct {
		Keys   []keyJSON   `json:"keys"`
		Audits []auditJSON `json:"audits"`
		Error  string      `json:"error,omitempty"`
	}{Keys: []keyJSON{}, Audits: []auditJSON{}}
	for _, k := range keys {
		kj := keyJSON{
			Subscription: k.Subscription, Key: k.Key, Count: k.Count, FirstID: k.FirstID,
			Reason: k.Reason, Class: k.Class,
			ParkedAt: k.ParkedAt.UTC().Format(time.RFC3339), Age: time.Duration(k.Age).Seconds(),
			Releasing: k.Releasing, LastFailure: k.LastFailure, FailedReleases: k.FailedReleases,
		}
		if !k.RequestedAt.IsZero() {
			kj.RequestedBy, kj.RequestedAge = k.RequestedBy, max(now.Sub(k.RequestedAt).Seconds(), 0)
		}
		out.Keys = append(out.Keys, kj)
	}
	audits, err := s.cfg.Lot.Audits(ctx)
	if err != nil {
		out.Error = s.clean(err)
	}
	for _, a := range audits {
		out.Audits = append(out.Audits, auditJSON{
			Subscription: a.Subscription, Key: a.Key, IDs: a.IDs, By: a.By, Reason: a.Why,
			Failure: a.Reason, DroppedAt: a.DroppedAt.UTC().Format(time.RFC3339),
		})
	}
	writeJSON(w, out)
}

func (s *Server) parkedMessages(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Lot == nil {
		writeError(w, http.StatusNotFound, errNoLot.Error())
		return
	}
	q := r.URL.Query()
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()
	d, err := s.cfg.Lot.Show(ctx, q.Get("subscription"), q.Get("key"), dlqLimit)
	if err != nil {
		writeError(w, codeOf(err), s.clean(err))
		return
	}
	type entryJSON struct {
		messageJSON
		Seq      int64  `json:"seq"`
		ParkedAt string `json:"parkedAt"`
	}
	out := struct {
		Messages []entryJSON `json:"messages"`
	}{Messages: []entryJSON{}}
	for _, m := range d.Messages {
		out.Messages = append(out.Messages, entryJSON{
			messageJSON: messageOf(m.ID, d.Key, m.Topic, m.Headers, m.Payload),
			Seq:         m.Seq, ParkedAt: m.ParkedAt.UTC().Format(time.RFC3339),
		})
	}
	writeJSON(w, out)
}

type keyRequest struct {
	Subscription string `json:"subscription"`
	Key          string `json:"key"`
	By           string `json:"by"`
	Reason       string `json:"reason"`
}

func (s *Server) release(ctx context.Context, body json.RawMessage) (any, int, error) {
	if s.cfg.Lot == nil {
		return nil, http.StatusNotFound, errNoLot
	}
	var req keyRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, http.StatusBadRequest, err
	}
	if req.Subscription == "" || req.Key == "" {
		return nil, http.StatusBadRequest, errors.New("console: release needs a subscription and a key")
	}
	by := operator(req.By)
	p, err := s.cfg.Lot.RequestRelease(ctx, req.Subscription, req.Key, by)
	if err != nil {
		return nil, codeOf(err), err
	}
	return map[string]any{"state": p.State, "left": p.Left, "by": by}, 0, nil
}

func (s *Server) drop(ctx context.Context, body json.RawMessage) (any, int, error) {
	if s.cfg.Lot == nil {
		return nil, http.StatusNotFound, errNoLot
	}
	var req keyRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, http.StatusBadRequest, err
	}
	req.Reason = strings.TrimSpace(req.Reason)
	if req.Subscription == "" || req.Key == "" || req.Reason == "" {
		return nil, http.StatusBadRequest, errors.New("console: drop needs a subscription, a key and a reason")
	}
	d, err := s.cfg.Lot.Drop(ctx, req.Subscription, req.Key, parking.Audit{By: operator(req.By), Reason: req.Reason})
	if err != nil {
		return nil, codeOf(err), err
	}
	return map[string]any{"dropped": len(d.IDs), "ids": d.IDs, "by": d.By, "reason": d.Why}, 0, nil
}

// operator is the name a write action is recorded under: the name the
// operator typed, and the tool.
func operator(name string) string {
	name = strings.TrimSpace(name)
	if name == "" {
		name = "operator"
	}
	if len(name) > 64 {
		name = name[:64]
	}
	return name + " (ferry console)"
}

// codeOf maps a lot error onto an HTTP status.
func codeOf(err error) int {
	switch {
	case errors.Is(err, parking.ErrNotParked):
		return http.StatusNotFound
	case errors.Is(err, parking.ErrReleasing):
		return http.StatusConflict
	case errors.Is(err, ops.ErrUsage):
		return http.StatusBadRequest
	}
	return http.StatusBadGateway
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
