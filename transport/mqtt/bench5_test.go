package mqtt_test

import (
	"context"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	paho5 "github.com/eclipse/paho.golang/paho"
	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/mqtt"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// The MQTT 5 comparisons: Ferry on its default URL (MQTT 5, the ID and a
// sequence number in two user properties) against raw paho.golang
// (autopaho) sending the same packets: the payload with the same two user
// properties, built per message (pahoProps), from a connection with the
// same session settings (a clean start and a Session Expiry Interval of
// 300 s, as Ferry's publishing connection has). 1 KiB messages at QoS 1
// over 100 topics, on one private Mosquitto. Each runs benchRounds rounds
// (compareSides), and reports the median of the per-round ratios
// ferry/paho, and each side's allocations and read and write system calls
// per message.

// tcpSettings are the Mosquitto settings the publish benchmarks run
// under: its default (Nagle's algorithm on the broker's sockets) and
// set_tcp_nodelay true.
var tcpSettings = []struct{ name, conf string }{
	{"nagle", ""},
	{"nodelay", "set_tcp_nodelay true"},
}

// eachTCPSetting runs f as a sub-benchmark per tcpSettings, each on a
// private broker of its own.
func eachTCPSetting(b *testing.B, f func(b *testing.B, r *sessionReaper)) {
	for _, s := range tcpSettings {
		b.Run(s.name, func(b *testing.B) {
			var extra []string
			if s.conf != "" {
				extra = append(extra, s.conf)
			}
			f(b, newReaper(b, startPrivateBroker(b, extra...).addr()))
		})
	}
}

// connectPaho5 connects a raw paho.golang client with autopaho and waits
// for the connection.
func connectPaho5(b *testing.B, addr string, cc paho5.ClientConfig, clean bool, expiry uint32, receiveMax uint16) *autopaho.ConnectionManager {
	u, _ := url.Parse("mqtt://" + addr)
	cfg := autopaho.ClientConfig{
		ServerUrls:                    []*url.URL{u},
		KeepAlive:                     30,
		CleanStartOnInitialConnection: clean,
		SessionExpiryInterval:         expiry,
		ClientConfig:                  cc,
	}
	if receiveMax > 0 {
		cfg.ConnectPacketBuilder = func(cp *paho5.Connect, _ *url.URL) (*paho5.Connect, error) {
			if cp.Properties == nil {
				cp.Properties = &paho5.ConnectProperties{}
			}
			cp.Properties.ReceiveMaximum = &receiveMax
			return cp, nil
		}
	}
	cm, err := autopaho.NewConnection(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cm.AwaitConnection(ctx); err != nil {
		b.Fatal(err)
	}
	return cm
}

func disconnect5(cm *autopaho.ConnectionManager) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = cm.Disconnect(ctx)
}

// pahoPubExpiry is the Session Expiry Interval of raw paho.golang's
// publishing connections: Ferry's publishing connection's (300 s).
const pahoPubExpiry = 300

// connectPahoPub5 connects a raw paho.golang publisher as Ferry's
// publishing connection is: a clean start, a session of pahoPubExpiry.
func connectPahoPub5(b *testing.B, addr string) *autopaho.ConnectionManager {
	return connectPaho5(b, addr, paho5.ClientConfig{ClientID: transporttest.UniqueName(b, "p")}, true, pahoPubExpiry, 0)
}

// pahoProps returns the user properties Ferry's publish of message i
// carries: its ID, and a publisher ID and a sequence number. Built per
// message, as Ferry builds them.
func pahoProps(i int) *paho5.PublishProperties {
	return &paho5.PublishProperties{User: paho5.UserProperties{
		{Key: "ferry-id", Value: "m" + strconv.Itoa(i)}, {Key: "ferry-seq", Value: "0123456789abcdef:" + strconv.Itoa(i)},
	}}
}

// pahoPublish5 publishes n messages with benchWindow goroutines each
// waiting for its PUBACK: raw paho.golang's way to keep a window of
// publishes in flight. Each message carries the user properties Ferry's
// carry (pahoProps).
func pahoPublish5(b *testing.B, cm *autopaho.ConnectionManager, topics []string, payload []byte, n int) {
	parallel(n, func(i int) error {
		_, err := cm.Publish(context.Background(), &paho5.Publish{QoS: 1, Topic: topics[i%benchTopics], Payload: payload, Properties: pahoProps(i)})
		return err
	}, b)
}

// BenchmarkPublish: Transport.Publish from benchWindow (64) goroutines
// against paho.golang's blocking Publish from as many, timed from the
// first publish to the last PUBACK, under both Mosquitto TCP settings.
//
//	go test -run XXX -bench 'Publish$' -benchtime 70000x ./transport/mqtt/
func BenchmarkPublish(b *testing.B) {
	payload := benchPayload()
	eachTCPSetting(b, func(b *testing.B, r *sessionReaper) {
		compareSides(b,
			func(n int, m *meter) time.Duration {
				pub := r.open(b)
				defer closeQuietly(pub)
				topics := benchTopicNames("ferry-bench/" + transporttest.UniqueName(b, "f") + "/")
				start := m.start()
				parallel(n, func(i int) error {
					return pub.Publish(context.Background(), &handler.Message{ID: "m" + strconv.Itoa(i), Topic: topics[i%benchTopics], Payload: payload})
				}, b)
				return m.since(start)
			},
			func(n int, m *meter) time.Duration {
				cm := connectPahoPub5(b, r.addr)
				defer disconnect5(cm)
				topics := benchTopicNames("ferry-bench/" + transporttest.UniqueName(b, "p") + "/")
				start := m.start()
				pahoPublish5(b, cm, topics, payload, n)
				return m.since(start)
			})
	})
}

// BenchmarkPublishAsync: one goroutine publishing through
// Transport.PublishAsync with a window of benchWindow (64) PUBACKs, then
// Flush, against raw paho.golang keeping as many blocking publishes in
// flight (it has no asynchronous publish with a result), under both
// Mosquitto TCP settings.
//
//	go test -run XXX -bench 'PublishAsync$' -benchtime 70000x ./transport/mqtt/
func BenchmarkPublishAsync(b *testing.B) {
	payload := benchPayload()
	eachTCPSetting(b, func(b *testing.B, r *sessionReaper) {
		compareSides(b,
			func(n int, m *meter) time.Duration { return ferryPublishAsync(b, r, m, payload, n) },
			func(n int, m *meter) time.Duration {
				cm := connectPahoPub5(b, r.addr)
				defer disconnect5(cm)
				topics := benchTopicNames("ferry-bench/" + transporttest.UniqueName(b, "p") + "/")
				start := m.start()
				pahoPublish5(b, cm, topics, payload, n)
				return m.since(start)
			})
	})
}

// ferryPublishAsync publishes n messages from one goroutine with
// PublishAsync and a window of benchWindow, and returns the time to the
// last result.
func ferryPublishAsync(b *testing.B, r *sessionReaper, m *meter, payload []byte, n int, opts ...mqtt.Option) time.Duration {
	pub := r.open(b, append([]mqtt.Option{mqtt.AsyncWindow(benchWindow)}, opts...)...)
	defer closeQuietly(pub)
	topics := benchTopicNames("ferry-bench/" + transporttest.UniqueName(b, "f") + "/")
	ctx := context.Background()
	start := m.start()
	for i := range n {
		if err := pub.PublishAsync(ctx, &handler.Message{ID: "m" + strconv.Itoa(i), Topic: topics[i%benchTopics], Payload: payload}, func(err error) {
			if err != nil {
				b.Error(err)
			}
		}); err != nil {
			b.Fatal(err)
		}
	}
	if err := pub.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	return m.since(start)
}

// BenchmarkPublishAsync311 is BenchmarkPublishAsync on MQTT 3.1.1:
// Ferry's PublishAsync against paho.mqtt.golang's asynchronous Publish
// with a window of benchWindow tokens waited for in order, under both
// Mosquitto TCP settings.
//
//	go test -run XXX -bench 'PublishAsync311$' -benchtime 70000x ./transport/mqtt/
func BenchmarkPublishAsync311(b *testing.B) {
	payload := benchPayload()
	eachTCPSetting(b, func(b *testing.B, r *sessionReaper) {
		compareSides(b,
			func(n int, m *meter) time.Duration { return ferryPublishAsync(b, r, m, payload, n, mqtt311...) },
			func(n int, m *meter) time.Duration {
				pc := connectPaho(b, r.addr, transporttest.UniqueName(b, "p"))
				defer pc.Disconnect(100)
				topics := benchTopicNames("ferry-bench/" + transporttest.UniqueName(b, "p") + "/")
				toks := make(chan paho.Token, benchWindow)
				done := make(chan struct{})
				go func() {
					defer close(done)
					for tok := range toks {
						if tok.Wait(); tok.Error() != nil {
							b.Error(tok.Error())
						}
					}
				}()
				start := m.start()
				for i := range n {
					toks <- pc.Publish(topics[i%benchTopics], 1, false, payload)
				}
				close(toks)
				<-done
				return m.since(start)
			})
	})
}

// BenchmarkDrain: a backlog queued in a persistent session while its
// consumer was away (published beforehand, untimed: by a Transport for
// Ferry's side, by raw paho.golang for paho's, with the same two user
// properties), drained by a Router with
// a no-op handler over Ferry's default URL and by a raw paho.golang
// client that acks as its callback returns, both with a Receive Maximum
// of 1024 (the Router's default MaxInFlight), timed from the first
// message handled to the last.
//
//	go test -run XXX -bench 'Drain$' -benchtime 70000x ./transport/mqtt/
func BenchmarkDrain(b *testing.B) {
	broker := startPrivateBroker(b)
	r := newReaper(b, broker.addr())
	payload := benchPayload()
	compareSides(b,
		func(n int, m *meter) time.Duration {
			id, filter := fillBacklog5(b, r, payload, n, true)
			return ferryDrain(b, r, m, id, filter, n)
		},
		func(n int, m *meter) time.Duration {
			id, _ := fillBacklog5(b, r, payload, n, false)
			var clock drainClock
			m.start()
			cm := connectPaho5(b, r.addr, paho5.ClientConfig{ClientID: id, OnPublishReceived: []func(paho5.PublishReceived) (bool, error){
				func(paho5.PublishReceived) (bool, error) { clock.tick(n); return true, nil },
			}}, false, 600, 1024)
			defer disconnect5(cm)
			d := clock.wait(b, n)
			m.stop()
			return d
		})
}

// fillBacklog5 creates an MQTT 5 persistent session subscribed to a fresh
// filter, leaves it, and publishes n messages to it (64 in flight) with a
// Transport (ferry) or raw paho.golang, so that the broker queues them for
// the session. It returns the session's client ID and the filter.
func fillBacklog5(b *testing.B, r *sessionReaper, payload []byte, n int, ferry bool) (id, filter string) {
	base := "ferry-bench/" + transporttest.UniqueName(b, "d") + "/"
	id, filter = transporttest.UniqueName(b, "c"), base+"+"
	r.add(id)
	sc := connectPaho5(b, r.addr, paho5.ClientConfig{ClientID: id}, true, 600, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := sc.Subscribe(ctx, &paho5.Subscribe{Subscriptions: []paho5.SubscribeOptions{{Topic: filter, QoS: 1}}}); err != nil {
		b.Fatal(err)
	}
	disconnect5(sc)
	topics := benchTopicNames(base)
	if ferry {
		pub := r.open(b)
		defer closeQuietly(pub)
		parallel(n, func(i int) error {
			return pub.Publish(context.Background(), &handler.Message{ID: "m" + strconv.Itoa(i), Topic: topics[i%benchTopics], Payload: payload})
		}, b)
		return id, filter
	}
	pc := connectPahoPub5(b, r.addr)
	defer disconnect5(pc)
	pahoPublish5(b, pc, topics, payload, n)
	return id, filter
}

// ferryDrain drains n messages queued for session id on filter with a
// Router and a no-op handler, and returns the time from the first message
// handled to the last.
func ferryDrain(b *testing.B, r *sessionReaper, m *meter, id, filter string, n int, opts ...mqtt.Option) time.Duration {
	m.start()
	sub := r.open(b, opts...)
	defer closeQuietly(sub)
	var clock drainClock
	rt, err := ferry.NewRouter()
	if err != nil {
		b.Fatal(err)
	}
	if err := rt.Add("drain", sub, transport.Subscription{Topic: filter, Consumer: id}, handler.HandlerFunc(func(context.Context, *handler.Message) error {
		clock.tick(n)
		return nil
	})); err != nil {
		b.Fatal(err)
	}
	rr := ferrytest.Start(b, rt)
	defer func() { _ = rr.Close(context.Background()) }()
	d := clock.wait(b, n)
	m.stop()
	return d
}

// BenchmarkPublishOneAtATime: one goroutine publishing and waiting for
// each PUBACK before the next (Transport.Publish; paho.golang's Publish),
// under both Mosquitto TCP settings: where the broker's Nagle setting
// shows most.
//
//	go test -run XXX -bench 'PublishOneAtATime$' -benchtime 5000x ./transport/mqtt/
func BenchmarkPublishOneAtATime(b *testing.B) {
	payload := benchPayload()
	eachTCPSetting(b, func(b *testing.B, r *sessionReaper) {
		compareSides(b,
			func(n int, m *meter) time.Duration {
				pub := r.open(b)
				defer closeQuietly(pub)
				topic := "ferry-bench/" + transporttest.UniqueName(b, "f")
				start := m.start()
				for i := range n {
					if err := pub.Publish(context.Background(), &handler.Message{ID: "m" + strconv.Itoa(i), Topic: topic, Payload: payload}); err != nil {
						b.Fatal(err)
					}
				}
				return m.since(start)
			},
			func(n int, m *meter) time.Duration {
				cm := connectPahoPub5(b, r.addr)
				defer disconnect5(cm)
				topic := "ferry-bench/" + transporttest.UniqueName(b, "p")
				start := m.start()
				for i := range n {
					if _, err := cm.Publish(context.Background(), &paho5.Publish{QoS: 1, Topic: topic, Payload: payload, Properties: pahoProps(i)}); err != nil {
						b.Fatal(err)
					}
				}
				return m.since(start)
			})
	})
}
