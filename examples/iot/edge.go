package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// Reading is what a sensor publishes, as raw JSON (no envelope: a device
// cannot carry one).
type Reading struct {
	ID      string  `json:"id"` // unique per reading: the Message.ID, and the dedupe key upstream
	Device  string  `json:"device"`
	Seq     int     `json:"seq"`
	Celsius float64 `json:"celsius"`
	At      string  `json:"at"`
}

// Alert is the event raised upstream when a reading is above the threshold.
type Alert struct {
	Site      string  `json:"site"`
	Device    string  `json:"device"`
	Seq       int     `json:"seq"`
	Celsius   float64 `json:"celsius"`
	Threshold float64 `json:"threshold"`
}

// Aggregate summarises a window of readings of one device, forwarded
// upstream instead of every reading.
type Aggregate struct {
	Site     string  `json:"site"`
	Device   string  `json:"device"`
	FirstSeq int     `json:"first_seq"`
	LastSeq  int     `json:"last_seq"`
	Count    int     `json:"count"`
	Min      float64 `json:"min"`
	Max      float64 `json:"max"`
	Mean     float64 `json:"mean"`
}

// Upstream topics.
const (
	ReadingsTopic   = "iot.readings" // every good reading, as the device sent it
	AlertsTopic     = "iot.alerts"
	AggregatesTopic = "iot.aggregates"
)

// window is how many readings of a device make one aggregate.
const window = 5

// Edge is the edge service's handler state. Its Handle runs for one device
// at a time (the Router orders by Key, the device ID), and for several
// devices at once.
type Edge struct {
	Site      string
	Threshold float64
	Upstream  transport.Publisher
	Log       *slog.Logger

	mu      sync.Mutex
	devices map[string]*deviceState
	stats   EdgeStats
}

// EdgeStats counts what the edge handled.
type EdgeStats struct {
	Handled         int
	Readings        int // readings forwarded upstream
	Alerts          int
	Aggregates      int
	OrderViolations int
}

type deviceState struct {
	lastSeq int
	win     []Reading
}

// Handle is the edge handler: a typed JSON handler, so a reading that does
// not decode is a permanent error (the dead-letter middleware sends it to
// the DLQ at once).
func (e *Edge) Handle() handler.Handler {
	return handler.JSON(func(ctx context.Context, m *handler.Message, r Reading) error {
		if r.Device == "" {
			return handler.Permanentf("reading without a device: %s", m.Payload)
		}
		var agg *Aggregate
		e.mu.Lock()
		if e.devices == nil {
			e.devices = make(map[string]*deviceState)
		}
		d := e.devices[r.Device]
		if d == nil {
			d = &deviceState{lastSeq: -1}
			e.devices[r.Device] = d
		}
		if r.Seq <= d.lastSeq {
			e.stats.OrderViolations++ // never happens: the Router keeps per-device order
		}
		d.lastSeq = r.Seq
		d.win = append(d.win, r)
		if len(d.win) == window {
			agg = aggregate(e.Site, d.win)
			d.win = d.win[:0]
		}
		e.mu.Unlock()

		// Every reading goes upstream as the device sent it, under its own
		// ID, keyed by device: the store-and-forward buffer keeps them in
		// this order while the uplink is down.
		if err := e.Upstream.Publish(ctx, &handler.Message{ID: m.ID, Key: r.Device, Topic: ReadingsTopic, Payload: m.Payload,
			Headers: map[string]string{"site": e.Site}}); err != nil {
			return err
		}
		e.count(func(s *EdgeStats) { s.Readings++ })
		if r.Celsius > e.Threshold {
			a := Alert{Site: e.Site, Device: r.Device, Seq: r.Seq, Celsius: r.Celsius, Threshold: e.Threshold}
			if err := e.forward(ctx, AlertsTopic, m.ID+"/alert", r.Device, a); err != nil {
				return err
			}
			e.count(func(s *EdgeStats) { s.Alerts++ })
		}
		if agg != nil {
			id := fmt.Sprintf("%s/%s/%d-%d", e.Site, agg.Device, agg.FirstSeq, agg.LastSeq)
			if err := e.forward(ctx, AggregatesTopic, id, agg.Device, agg); err != nil {
				return err
			}
			e.count(func(s *EdgeStats) { s.Aggregates++ })
		}
		e.count(func(s *EdgeStats) { s.Handled++ })
		return nil
	})
}

// forward publishes v upstream with a stable ID, so that a retry or a
// redelivery publishes the same event and the upstream consumers dedupe.
func (e *Edge) forward(ctx context.Context, topic, id, key string, v any) error {
	p, err := json.Marshal(v)
	if err != nil {
		return handler.Permanent(err)
	}
	return e.Upstream.Publish(ctx, &handler.Message{ID: id, Key: key, Topic: topic, Payload: p})
}

func (e *Edge) count(f func(*EdgeStats)) {
	e.mu.Lock()
	f(&e.stats)
	e.mu.Unlock()
}

// Stats returns a copy of the counts.
func (e *Edge) Stats() EdgeStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stats
}

func aggregate(site string, rs []Reading) *Aggregate {
	a := &Aggregate{Site: site, Device: rs[0].Device, FirstSeq: rs[0].Seq, LastSeq: rs[len(rs)-1].Seq,
		Count: len(rs), Min: rs[0].Celsius, Max: rs[0].Celsius}
	sum := 0.0
	for _, r := range rs {
		a.Min, a.Max = min(a.Min, r.Celsius), max(a.Max, r.Celsius)
		sum += r.Celsius
	}
	a.Mean = sum / float64(len(rs))
	return a
}

// Upstream is the upstream service: the same handler model, on whatever
// transport the upstream URL names.
type Upstream struct {
	mu         sync.Mutex
	seen       map[string]bool // dedupe by ID: redeliveries are expected
	Readings   int
	Alerts     int
	Aggregates int
}

// Handle counts alerts and aggregates once each.
func (u *Upstream) Handle(ctx context.Context, m *handler.Message) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.seen == nil {
		u.seen = make(map[string]bool)
	}
	if u.seen[m.ID] {
		return nil
	}
	u.seen[m.ID] = true
	switch m.Topic {
	case ReadingsTopic:
		u.Readings++
	case AlertsTopic:
		u.Alerts++
	case AggregatesTopic:
		u.Aggregates++
	}
	return nil
}

// Counts returns the readings, alerts and aggregates received.
func (u *Upstream) Counts() (readings, alerts, aggregates int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.Readings, u.Alerts, u.Aggregates
}
