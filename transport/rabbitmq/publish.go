package rabbitmq

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

func newTLSConfig(host string) *tls.Config {
	return &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
}

// returnKey identifies a returned message well enough to give the return
// to the Publish call that sent it: the same ID, exchange and routing key
// route the same way.
type returnKey struct {
	exchange, routingKey, id string
}

type returned struct {
	n    int
	text string
	at   time.Time
}

// pubChannel is one confirm-mode channel. Publishes on it are pipelined:
// each waits for its own confirm while later ones go out.
type pubChannel struct {
	ch   *amqp.Channel
	sess *session

	returns chan amqp.Return
	mu      sync.Mutex
	ret     map[returnKey]*returned
}

// takeReturn reports whether the broker returned the message identified by
// k, consuming one return. Returns reach the channel before the confirm of
// the same message, so after the confirm a return, if any, is queued.
func (pc *pubChannel) takeReturn(k returnKey) (string, bool) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	pc.drainLocked()
	r := pc.ret[k]
	if r == nil {
		return "", false
	}
	r.n--
	if r.n == 0 {
		delete(pc.ret, k)
	}
	return r.text, true
}

func (pc *pubChannel) drainLocked() {
	for {
		select {
		case r, ok := <-pc.returns:
			if !ok {
				return
			}
			k := returnKey{r.Exchange, r.RoutingKey, r.MessageId}
			e := pc.ret[k]
			if e == nil {
				e = &returned{}
				pc.ret[k] = e
			}
			e.n++
			e.text = strconv.Itoa(int(r.ReplyCode)) + " " + r.ReplyText
			e.at = time.Now()
		default:
			return
		}
	}
}

// sweep drains returns nobody waits for any more (their Publish gave up)
// so that the library never blocks on a full return channel.
func (pc *pubChannel) sweep(now time.Time) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	pc.drainLocked()
	for k, r := range pc.ret {
		if now.Sub(r.at) > time.Minute {
			delete(pc.ret, k)
		}
	}
}

// publisher owns the confirm channels and the per-connection record of
// declared exchanges.
type publisher struct {
	t     *Transport
	slots []atomic.Pointer[pubChannel]
	open  []sync.Mutex // one per slot: serialises channel opening
	next  atomic.Uint32

	declared sync.Map // topic -> generation of the session it was declared on

	async    *asyncWindow
	closed   atomic.Bool
	inflight atomic.Int64 // publishes between prepare and the end of await, or of PublishAsync's callback
	stop     chan struct{}
	done     chan struct{}
}

func newPublisher(t *Transport) *publisher {
	n := t.cfg.publishChannels
	p := &publisher{t: t, slots: make([]atomic.Pointer[pubChannel], n), open: make([]sync.Mutex, n),
		stop: make(chan struct{}), done: make(chan struct{})}
	p.async = newAsyncWindow(p, t.cfg.publishWindow)
	go p.sweeper()
	return p
}

func (p *publisher) sweeper() {
	defer close(p.done)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case now := <-tick.C:
			for i := range p.slots {
				if pc := p.slots[i].Load(); pc != nil {
					pc.sweep(now)
				}
			}
		case <-p.stop:
			return
		}
	}
}

// channel returns an open confirm channel for slot i, opening one (and
// waiting for a connection) when needed.
func (p *publisher) channel(ctx context.Context, i int) (*pubChannel, error) {
	if pc := p.slots[i].Load(); pc != nil && !pc.ch.IsClosed() {
		return pc, nil
	}
	p.open[i].Lock()
	defer p.open[i].Unlock()
	if pc := p.slots[i].Load(); pc != nil && !pc.ch.IsClosed() {
		return pc, nil
	}
	ch, sess, err := p.t.conn.channel(ctx)
	if err != nil {
		return nil, err
	}
	if err := p.t.conn.call(sess, "confirm mode", func() error { return ch.Confirm(false) }); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("rabbitmq: confirm mode: %w", err)
	}
	pc := &pubChannel{ch: ch, sess: sess, returns: ch.NotifyReturn(make(chan amqp.Return, 4096)),
		ret: make(map[returnKey]*returned)}
	p.slots[i].Store(pc)
	return pc, nil
}

// ensureExchange declares the topic's exchange once per connection.
func (p *publisher) ensureExchange(sess *session, topic string) error {
	if g, ok := p.declared.Load(topic); ok && g.(uint64) == sess.gen {
		return nil
	}
	err := p.t.conn.call(sess, "declare exchange "+topic, func() error {
		ch, err := sess.conn.Channel()
		if err != nil {
			return fmt.Errorf("rabbitmq: open channel: %w", err)
		}
		defer ch.Close()
		return p.t.declareExchange(ch, topic, "")
	})
	if err != nil {
		return err
	}
	p.declared.Store(topic, sess.gen)
	return nil
}

func (p *publisher) close(ctx context.Context) {
	if p.closed.Swap(true) {
		return
	}
	// Let publishes in flight have their confirms, until ctx ends.
	for p.inflight.Load() > 0 && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	close(p.stop)
	<-p.done
	for i := range p.slots {
		if pc := p.slots[i].Load(); pc != nil {
			_ = pc.ch.Close()
		}
	}
	p.async.close()
}

// Publish sends m to the exchange named m.Topic (declared on first use, of
// the kind from [ExchangeKind] or [Declare]) with the routing key from
// [RoutingKey] (default: m.Key), persistent, with message_id = m.ID, the
// Key in the "ferry-key" header and m.Headers in the headers table (the
// property headers, such as "content-type", set the AMQP properties). It
// returns when the broker confirmed this message; publishes from many
// goroutines are pipelined on the confirm channel. While the connection is
// down Publish waits for the reconnect, bounded by ctx.
//
// Errors: [ErrUnroutable] when the broker returned the mandatory message
// (no queue bound); [ErrNacked] on basic.nack; [ErrBlocked] while a broker
// alarm blocks publishing and ctx ends; [transport.ErrUnknownOutcome] when
// the message may have been stored (connection lost or ctx ended after the
// write); [transport.ErrTooLarge]; [transport.ErrInvalidMessage] for a
// message the consumer would not get back as it was sent (an ID, Key or
// header name over AMQP's 255-byte short strings, a ferry-id or ferry-key
// header, an attempt header such as x-delivery-count) or that the broker
// would not take (properties and headers over the connection's frame_max:
// RabbitMQ would close the connection), naming the field and written
// before anything is sent; [transport.ErrClosed] after Close.
func (t *Transport) Publish(ctx context.Context, m *handler.Message) error {
	return t.pub.publish(ctx, m)
}

// PublishBatch publishes msgs through [Transport.PublishAsync], in order,
// keeping up to the publish window ([PublishWindow]) unconfirmed at once,
// and waits for every confirm. It returns nil when every message was
// confirmed, otherwise a *[transport.BatchError] with each message's own
// error.
func (t *Transport) PublishBatch(ctx context.Context, msgs []*handler.Message) error {
	return transport.PublishAll(ctx, t, msgs)
}

func (p *publisher) publish(ctx context.Context, m *handler.Message) error {
	p.inflight.Add(1)
	defer p.inflight.Add(-1)
	w, err := p.prepare(ctx, m)
	if err != nil {
		return err
	}
	return w.await(ctx)
}

// prepare checks m and writes it.
func (p *publisher) prepare(ctx context.Context, m *handler.Message) (pending, error) {
	rk, pub, err := p.encode(m)
	if err != nil {
		return pending{}, err
	}
	return p.write(ctx, m.Topic, rk, pub, true, publishReserve)
}

// encode checks m and returns its routing key and AMQP message: the one
// encoding of Publish, PublishAsync and PublishAt.
func (p *publisher) encode(m *handler.Message) (string, amqp.Publishing, error) {
	if p.closed.Load() {
		return "", amqp.Publishing{}, transport.ErrClosed
	}
	if m.Topic == "" {
		return "", amqp.Publishing{}, fmt.Errorf("%w: rabbitmq: publish: empty Topic", transport.ErrInvalidOption)
	}
	if max := p.t.cfg.maxPayload; max > 0 && len(m.Payload) > max {
		return "", amqp.Publishing{}, fmt.Errorf("rabbitmq: publish %s: %d bytes: %w", m.Topic, len(m.Payload), transport.ErrTooLarge)
	}
	rk := m.Key
	if p.t.cfg.routingKey != nil {
		rk = p.t.cfg.routingKey(m)
	}
	if n := p.t.shardsOf(m.Topic); n > 1 {
		rk = strconv.Itoa(shardOf(m.Key, n)) + "." + rk
	}
	if err := checkMessage(m, rk); err != nil {
		return "", amqp.Publishing{}, fmt.Errorf("rabbitmq: publish %s: %w", m.Topic, err)
	}
	pub := toPublishing(m, time.Now())
	if m.Key == "" && rk != "" {
		// An empty Key must not be read back as the routing key.
		if pub.Headers == nil {
			pub.Headers = amqp.Table{}
		}
		pub.Headers[transport.HeaderKey] = ""
	}
	return rk, pub, nil
}

// send publishes pub and waits for its confirm. With declare it first
// declares the exchange as a topic's (once per connection).
func (p *publisher) send(ctx context.Context, exchange, rk string, pub amqp.Publishing, declare bool) error {
	p.inflight.Add(1)
	defer p.inflight.Add(-1)
	pending, err := p.write(ctx, exchange, rk, pub, declare, copyReserve)
	if err != nil {
		return err
	}
	return pending.await(ctx)
}

// pending is a publish written to a channel and not yet confirmed.
type pending struct {
	p        *publisher
	pc       *pubChannel
	dc       *amqp.DeferredConfirmation
	exchange string
	rk       string
	id       string
}

// write publishes pub on a confirm channel, if its content header frame
// leaves reserve bytes of the connection's frame_max free. If the channel or its
// connection turns out to be closed before anything was written, it tries
// once more on a new channel (dialling if need be); any other failure is
// returned, for the caller to retry.
func (p *publisher) write(ctx context.Context, exchange, rk string, pub amqp.Publishing, declare bool, reserve int) (pending, error) {
	n := len(p.slots)
	i := 0
	if n > 1 {
		i = int(p.next.Add(1) % uint32(n))
	}
	for try := 0; ; try++ {
		if err := ctx.Err(); err != nil {
			return pending{}, fmt.Errorf("rabbitmq: publish %s: %w", exchange, err)
		}
		pc, err := p.channel(ctx, i)
		if err != nil {
			return pending{}, fmt.Errorf("rabbitmq: publish %s: %w", exchange, err)
		}
		if declare {
			if err := p.ensureExchange(pc.sess, exchange); err != nil {
				if pc.sess.conn.IsClosed() && try == 0 {
					continue
				}
				return pending{}, fmt.Errorf("rabbitmq: publish %s: %w", exchange, err)
			}
		}
		if err := p.t.conn.waitUnblocked(ctx); err != nil {
			return pending{}, fmt.Errorf("rabbitmq: publish %s: %w", exchange, err)
		}
		if err := checkFrame(&pub, pc.sess.conn.Config.FrameSize, reserve); err != nil {
			// Nothing written: the connection and the publishes on it
			// are untouched.
			return pending{}, fmt.Errorf("rabbitmq: publish %s: %w", exchange, err)
		}
		dc, err := pc.ch.PublishWithDeferredConfirm(exchange, rk, p.t.cfg.mandatory, false, pub)
		if err != nil {
			if errors.Is(err, amqp.ErrClosed) {
				// Not written: the channel was closed before the frame left.
				if try == 0 {
					continue
				}
				return pending{}, fmt.Errorf("rabbitmq: publish %s: %w", exchange, err)
			}
			return pending{}, fmt.Errorf("rabbitmq: publish %s: %w: %w", exchange, transport.ErrUnknownOutcome, err)
		}
		return pending{p: p, pc: pc, dc: dc, exchange: exchange, rk: rk, id: pub.MessageId}, nil
	}
}

// await waits for the confirm of a written publish and turns a nack, a
// return or a lost channel into the matching error.
func (w pending) await(ctx context.Context) error {
	parent := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w.p.t.cfg.timeout)
		defer cancel()
	}
	select {
	case <-w.dc.Done():
	case <-ctx.Done():
		if reason := w.p.t.conn.blockedReason(); reason != "" {
			return fmt.Errorf("rabbitmq: publish %s: awaiting confirm: %w (%s): %w: %w", w.exchange, ErrBlocked, reason, transport.ErrUnknownOutcome, ctx.Err())
		}
		cause := context.Cause(ctx)
		if ctx != parent && parent.Err() == nil {
			// Our own Timeout ran out (its text is made here, not for
			// every publish).
			cause = fmt.Errorf("no confirm from %s%s within %s (Timeout)", w.p.t.conn.host, w.p.t.conn.via, w.p.t.cfg.timeout)
		}
		return fmt.Errorf("rabbitmq: publish %s: awaiting confirm from %s: %w: %w (%v)", w.exchange, w.p.t.conn.host, transport.ErrUnknownOutcome, ctx.Err(), cause)
	}
	return w.outcome()
}

// outcome is the result of a publish whose confirm has come (w.dc.Done()
// is closed): a nack, a return or a lost channel as their errors.
func (w pending) outcome() error {
	if !w.dc.Acked() {
		if w.pc.ch.IsClosed() {
			return fmt.Errorf("rabbitmq: publish %s: channel closed before the confirm: %w", w.exchange, transport.ErrUnknownOutcome)
		}
		return fmt.Errorf("rabbitmq: publish %s: %w", w.exchange, ErrNacked)
	}
	if w.p.t.cfg.mandatory {
		if text, ok := w.pc.takeReturn(returnKey{w.exchange, w.rk, w.id}); ok {
			return fmt.Errorf("rabbitmq: publish %s (routing key %q): %w: %s", w.exchange, w.rk, ErrUnroutable, text)
		}
	}
	return nil
}
