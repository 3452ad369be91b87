// Package mqtt is the Ferry transport for MQTT 3.1.1 brokers (Mosquitto 2
// and compatible), on github.com/eclipse/paho.mqtt.golang: QoS 1 publishes
// confirmed by PUBACK, subscriptions on persistent sessions with manual
// acks in arrival order, shared subscriptions for groups, raw device
// payloads by default, an opt-in envelope, and a built DLQ topic.
//
// Programs pick it with a blank import and a URL, or build it with [New]:
//
//	import _ "github.com/ferrymq/ferry/transport/mqtt"
//	t, err := transport.Open(ctx, "mqtt://127.0.0.1:1883?client_id=edge-1")
//
// The page docs/transports/mqtt.md explains when MQTT fits, and the
// Mosquitto settings that matter (max_queued_messages above all).
//
// # URLs
//
// mqtt://[user:password@]host[:port] connects over TCP (port 1883 by
// default); mqtts://… over TLS (port 8883 by default, system roots unless
// ca is given). Query keys, each mapping to one option:
//
//   - client_id: the publishing connection's client ID ([ClientID]; default
//     "ferry-pub-" and a random suffix)
//   - keepalive: [KeepAlive] (default 30s); connect_timeout:
//     [ConnectTimeout] (default 10s); reconnect_max:
//     [MaxReconnectInterval] (default 10s)
//   - ca, cert, key_file: PEM files for TLS ([CAFile], [ClientCert])
//   - retain=true: publish retained ([Retain]; default false)
//   - format=raw|envelope: [PayloadFormat] (default raw)
//   - id=hash|json:<field>: [IDFrom] (default hash; json falls back to hash)
//   - key=topic|level:<n>|json:<field>: [KeyFrom] (default topic)
//   - max_payload: [MaxPayload] in bytes (default 1048576)
//   - dlq_prefix: [DLQPrefix] (default "ferry/dlq/")
//   - remove_sessions=true: [RemoveSessionsOnClose]
//
// The user information gives [Credentials]. An unknown key is an error
// that names it; passwords never appear in errors or logs.
//
// # Delivery semantics
//
// Every stream declares the same [transport.Semantics]:
//
//   - Ordering per-topic: within one session, the messages of one topic
//     arrive in publish order (MQTT's ordered-topic guarantee). Across the
//     topics of a wildcard there is no order, and in a shared subscription
//     each member sees its share in order. The default Key is the topic, so
//     the Router's per-key order is the topic's order.
//   - Ack in-order: MQTT 3.1.1 requires PUBACKs in the order the messages
//     arrived, so the stream holds a message's PUBACK until every earlier
//     message of its connection is acked. Acks are sent as soon as they are
//     contiguous (no timer, no batching). A crash loses the held acks: the
//     broker redelivers those messages, never loses them.
//   - Redelivery on-reconnect: the broker redelivers an unacked message
//     only when the session reconnects (a stream closed and opened again
//     with the same client ID, a restarted process, a dropped connection).
//     Nack is unsupported: it returns an error wrapping
//     errors.ErrUnsupported and leaves the delivery unsettled. The Router
//     then re-runs the message in process after the delay, with its key
//     held; retry middleware and dead-lettering bound that. An unsettled
//     delivery holds back the PUBACKs after it until a reconnect.
//   - FanOut true: every group (a shared subscription $share/<group>/…, or
//     a plain persistent session) receives every message of the topic.
//   - NackDelay, Attempts, Extend, NativeDLQ and Replay are false: MQTT has
//     no delayed redelivery, no delivery count (Facts.Attempt is 1, or 2
//     for a message the broker flags as a duplicate), no leases, no DLQ
//     and no history beyond a topic's retained message.
//   - Headers is true only with [Envelope].
//   - MaxPayload is [MaxPayload] (1 MiB by default).
//   - RedeliveryDelay is 0: redelivery happens as the session reconnects.
//
// Each subscription has a connection and a persistent session (clean
// session false) of its own, named by its client ID (Subscription.Consumer,
// or one derived from Group and Topic), at QoS 1. The broker queues the
// session's messages while it is away (subject to Mosquitto's
// max_queued_messages, 1000 by default, beyond which it DROPS them), and
// redelivers what it had not acked. A Group makes a shared subscription,
// $share/<group>/<topic>: members split the messages. Mosquitto 2.0 does
// not persist shared subscriptions: after a broker restart, messages
// published before the members resubscribe are dropped (a plain
// subscription's session keeps them). A group with one consumer that must
// not lose them sets the subscription option share=false. After a lost
// connection the stream reconnects with backoff (1s doubling up to
// [MaxReconnectInterval]) and subscribes again.
//
// Publish waits for the PUBACK. While the connection is down it waits for
// the reconnect, bounded by its context: if the context ends first nothing
// was sent and the error wraps [ErrNotConnected]; if it ends after the
// message was handed to the connection, the error wraps
// [transport.ErrUnknownOutcome].
//
// # Wire format
//
// Raw (the default): the MQTT payload is Message.Payload, byte for byte;
// the topic is Message.Topic. Nothing else travels. A subscriber computes
// Message.ID with [IDFrom] ([ContentHash] of topic and payload by default,
// or a JSON field) and Message.Key with [KeyFrom] (the topic by default, a
// topic level, or a JSON field). Headers are nil.
//
// Envelope ([PayloadFormat](Envelope)): the payload is a JSON object,
//
//	{"ferry":1,"id":"evt-1","key":"device-7","headers":{"k":"v"},"payload":"<base64>"}
//
// where ferry is the format version (1), id is required, key and headers
// are optional, and payload is the Message's Payload in standard base64.
// Unknown fields are rejected. A payload on an envelope subscription that
// does not parse is a permanent error: the stream publishes it, unchanged,
// to the subscription's DLQ with the dead-letter headers and acks it; the
// handler never sees it.
//
// Dead letters always travel in the envelope, so that their error
// headers do too. A DLQ is a topic, "ferry/dlq/<name>" by default
// ([DLQTopic], [DLQPrefix]), kept by a persistent session of its own
// ("ferry-dlq-<hash>") that Ferry creates before the first dead letter is
// published, so that the broker keeps dead letters while nobody reads
// them. [Transport.ListDLQ] and [Transport.ReplayDLQ] read that session.
//
// # Not supported
//
//   - Nack (errors.ErrUnsupported): MQTT 3.1.1 has no negative ack.
//   - QoS 0 and 2: every publish and subscription is QoS 1 (a QoS 0
//     message from another client is delivered and its Ack does nothing).
//   - Subscription.StartAtOldest (no history) and MaxInFlight (the broker's
//     max_inflight_messages sets the window, 20 by default in Mosquitto).
//   - MQTT 5 features (user properties, message expiry, receive maximum).
//   - Headers without the envelope.
//   - Running one subscription's client ID in two processes at once: the
//     broker lets the newer connection take over the session, and the two
//     take turns forever. Give each process its own Subscription.Consumer.
package mqtt
