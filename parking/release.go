package parking

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ferrymq/ferry/handler"
)

// ErrInvalidOption is wrapped by the error [Release] and [ReleaseAll]
// return for an invalid option or argument. It is
// [handler.ErrInvalidOption].
var ErrInvalidOption = handler.ErrInvalidOption

// A ReleaseOption configures [Release] and [ReleaseAll]. Options are made
// by the functions of this package; the interface is sealed.
type ReleaseOption interface{ apply(*releaseConfig) }

type releaseConfig struct {
	lease time.Duration
	batch int
}

type releaseOption func(*releaseConfig)

func (o releaseOption) apply(c *releaseConfig) { o(c) }

// LockLease sets how long a release holds the key's lock without renewing
// it, overriding one minute ([DefaultLockLease]). Every replayed message
// renews it, so it must outlast the replay of one message (its retries
// included): if it ends mid-replay, another release may take the key and
// replay that message again. d must be at least 1ms.
func LockLease(d time.Duration) ReleaseOption {
	return releaseOption(func(c *releaseConfig) { c.lease = d })
}

// BatchSize sets how many parked messages a release reads from the lot at
// a time, overriding 100. n must be at least 1.
func BatchSize(n int) ReleaseOption {
	return releaseOption(func(c *releaseConfig) { c.batch = n })
}

// Released says what a release did.
type Released struct {
	Subscription, Key string
	// Replayed counts the messages replayed successfully (and removed from
	// the lot), arrivals during the release included.
	Replayed int
	// Unparked reports that the key was unparked: every parked message was
	// replayed, and new messages of the key flow normally again.
	Unparked bool
}

// replayKey is the context key of a replay.
type replayKey struct{}

// Replay is what a handler chain sees of a message that [Release] replays.
// middleware.Park finds it with [ReplayFromContext], lets the message
// through to the handlers inside it instead of appending it to the lot,
// and reports the outcome with Done, returning nil so that no middleware
// outside it (a dead-letter) acts on a failure: the release decides.
type Replay struct {
	Subscription, Key string
	Seq               int64 // the message's position in the lot

	reported bool
	err      error
}

// Done reports the outcome of the handlers inside the park middleware:
// nil means the message's effect is done.
func (r *Replay) Done(err error) { r.reported, r.err = true, err }

// ReplayFromContext returns the replay that ctx carries, if the message is
// being replayed by [Release].
func ReplayFromContext(ctx context.Context) (*Replay, bool) {
	r, ok := ctx.Value(replayKey{}).(*Replay)
	return r, ok
}

func newReleaseConfig(opts []ReleaseOption) (releaseConfig, error) {
	c := releaseConfig{lease: DefaultLockLease, batch: 100}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	switch {
	case c.lease < time.Millisecond:
		return c, fmt.Errorf("%w: parking: LockLease(%s): want at least 1ms", ErrInvalidOption, c.lease)
	case c.batch < 1:
		return c, fmt.Errorf("%w: parking: BatchSize(%d): want 1 or more", ErrInvalidOption, c.batch)
	}
	return c, nil
}

// Release replays the parked messages of key on sub, in order, through h,
// and then unparks the key.
//
// h is the subscription's whole handler chain, as the Router runs it
// (middleware.Park included, and whatever sits outside it): each message
// is replayed with a context carrying a [Replay], which Park recognises.
// It gets the Facts it was delivered with, but Attempt 1, so that a
// replayed message has a fresh retry budget.
//
// The release takes the key's lock first ([ErrReleasing] if another
// release holds it), then repeatedly reads the oldest parked messages,
// replays each and removes it from the lot, and when none is left asks
// the lot to unpark the key — which it does only if no message arrived
// meanwhile; if one did, the release goes on with it. Consumers keep
// appending new messages of the key behind the parked ones all the while,
// in any process. See the package doc for why nothing overtakes.
//
// If a replayed message fails again, the release stops: the key stays
// parked with that message first and the rest behind it, the failure is
// recorded (KeyInfo.LastFailure), and the error wraps [ErrReplayFailed].
// If ctx ends, the release stops with ctx's error, the key stays parked,
// and the lock is given up. Released says how far it got in every case.
func Release(ctx context.Context, lot Lot, sub, key string, h handler.Handler, opts ...ReleaseOption) (Released, error) {
	c, err := newReleaseConfig(opts)
	out := Released{Subscription: sub, Key: key}
	if err != nil {
		return out, err
	}
	if lot == nil || h == nil {
		return out, fmt.Errorf("%w: parking: Release needs a lot and a handler", ErrInvalidOption)
	}
	tok, err := lot.Lock(ctx, sub, key, c.lease)
	if err != nil {
		return out, fmt.Errorf("parking: release %s/%s: %w", sub, key, err)
	}
	unlock := func(f *Failure) {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = lot.Unlock(uctx, sub, key, tok, f)
	}
	for {
		batch, err := lot.Messages(ctx, sub, key, 0, c.batch)
		if err != nil {
			unlock(nil)
			return out, fmt.Errorf("parking: release %s/%s: %w", sub, key, err)
		}
		if len(batch) == 0 {
			done, err := lot.Unpark(ctx, sub, key, tok)
			if err != nil {
				if !errors.Is(err, ErrLockLost) {
					unlock(nil)
				}
				return out, fmt.Errorf("parking: release %s/%s: %w", sub, key, err)
			}
			if done {
				out.Unparked = true
				return out, nil
			}
			continue // messages arrived meanwhile: replay them too
		}
		for _, e := range batch {
			herr := replay(ctx, h, sub, key, e)
			if herr != nil {
				if ctx.Err() != nil {
					unlock(nil)
					return out, fmt.Errorf("parking: release %s/%s: %w", sub, key, ctx.Err())
				}
				f := Failure{Error: herr.Error(), Class: handler.Class(herr), Attempts: max(e.Message.Attempt(), 1), At: time.Now()}
				unlock(&f)
				return out, &ReplayError{Subscription: sub, Key: key, ID: e.Message.ID, Seq: e.Seq, Replayed: out.Replayed, Err: herr}
			}
			if err := lot.Remove(ctx, sub, key, tok, e.Seq); err != nil {
				if !errors.Is(err, ErrLockLost) {
					unlock(nil)
				}
				return out, fmt.Errorf("parking: release %s/%s: message %s replayed but not removed: %w", sub, key, e.Message.ID, err)
			}
			out.Replayed++
		}
	}
}

// replay runs one parked message through h and returns its outcome.
func replay(ctx context.Context, h handler.Handler, sub, key string, e Entry) (err error) {
	m := e.Message
	f := m.Facts()
	f.Attempt = 1
	if f.Subscription == "" {
		f.Subscription = sub
	}
	m.SetFacts(f)
	r := &Replay{Subscription: sub, Key: key, Seq: e.Seq}
	defer func() {
		if v := recover(); v != nil {
			err = &handler.PanicError{Value: v}
		}
	}()
	herr := h.Handle(context.WithValue(ctx, replayKey{}, r), m)
	if herr != nil {
		return herr // the chain failed outside Park (or without it)
	}
	if r.reported {
		return r.err
	}
	return nil
}

// ReleaseAll releases every parked key of sub, oldest first, one after
// another, as [Release] does. Keys another release holds are skipped. It
// returns what each release did, and the errors of those that stopped
// short, joined.
func ReleaseAll(ctx context.Context, lot Lot, sub string, h handler.Handler, opts ...ReleaseOption) ([]Released, error) {
	if _, err := newReleaseConfig(opts); err != nil {
		return nil, err
	}
	if lot == nil || h == nil {
		return nil, fmt.Errorf("%w: parking: ReleaseAll needs a lot and a handler", ErrInvalidOption)
	}
	keys, err := lot.Keys(ctx, sub)
	if err != nil {
		return nil, fmt.Errorf("parking: release all of %s: %w", sub, err)
	}
	var out []Released
	var errs []error
	for _, k := range keys {
		r, err := Release(ctx, lot, sub, k.Key, h, opts...)
		out = append(out, r)
		switch {
		case err == nil, errors.Is(err, ErrReleasing), errors.Is(err, ErrNotParked):
		default:
			errs = append(errs, err)
			if ctx.Err() != nil {
				return out, errors.Join(errs...)
			}
		}
	}
	return out, errors.Join(errs...)
}
