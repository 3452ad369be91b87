// Package mqtt is the Ferry transport for MQTT brokers (Mosquitto 2 and
// compatible). It speaks MQTT 5 by default, on
// github.com/eclipse/paho.golang (autopaho reconnects), and MQTT 3.1.1 on
// request (protocol=3.1.1), on github.com/eclipse/paho.mqtt.golang, for
// brokers and devices without MQTT 5. Publishes are confirmed by the
// broker (QoS 1 by default, or 2); subscriptions run on persistent
// sessions with manual acknowledgements in arrival order; Message.ID, Key
// and Headers travel as MQTT 5 user properties (a JSON envelope on MQTT
// 3.1.1); raw device payloads are an opt-in; dead letters go to a built
// DLQ topic.
//
// Programs pick it with a blank import and a URL, or build it with [New]:
//
//	import _ "github.com/ferrymq/ferry/transport/mqtt"
//	t, err := transport.Open(ctx, "mqtt://127.0.0.1:1883")
//
//	t, err := mqtt.New(ctx, "mqtt://127.0.0.1:1883?format=raw&key=level:3", mqtt.WithLogger(log))
//
// The page docs/transports/mqtt.md explains why MQTT 5 is the default,
// when MQTT fits, and the Mosquitto settings that matter:
// max_queued_messages above all, since Mosquitto drops what a session has
// queued beyond it (1000 by default). Package forward puts a
// store-and-forward buffer in front of a Transport, for an edge whose
// uplink comes and goes.
//
// # URLs
//
// mqtt://[user:password@]host[:port] connects over TCP (port 1883 by
// default); mqtts://… over TLS (port 8883 by default, system roots unless
// ca is given). Query keys, each mapping to one option (typed options
// given to New apply after the URL's):
//
//   - protocol=5|3.1.1: [Protocol] (default 5)
//   - format=properties|envelope|raw: [PayloadFormat] (default properties
//     with MQTT 5, envelope with 3.1.1)
//   - qos=1|2: [QoS] (default 1)
//   - id=hash|json:<field>: [IDFrom], for messages without an ID (default
//     hash; json falls back to hash)
//   - key=topic|level:<n>|json:<field>: [KeyFrom], likewise (default
//     topic)
//   - client_id: the publishing connection's client ID, and the suffix of
//     this process's shared-subscription members ([ClientID]; default
//     "ferry-pub-" and a random suffix)
//   - session_expiry: [SessionExpiry], MQTT 5 (default: until removed)
//   - keepalive: [KeepAlive] (default 30s); connect_timeout:
//     [ConnectTimeout] (default 10s); call_timeout: [CallTimeout] (default
//     30s); reconnect_max: [MaxReconnectInterval] (default 10s)
//   - window: [AsyncWindow] (default 256)
//   - tls_ca, tls_cert and tls_key: PEM files for TLS ([CAFile], [ClientCert]),
//     spelled as on every transport
//   - allow_plaintext_auth=true: [AllowPlaintextAuth]
//   - retain=true: publish retained ([Retain]; default false)
//   - max_payload: [MaxPayload] in bytes (default 1048576)
//   - dlq_prefix: [DLQPrefix] (default "ferry/dlq/")
//   - remove_sessions=true: [RemoveSessionsOnClose]
//
// The user information gives [Credentials], refused over a connection
// without TLS unless allow_plaintext_auth=true. An unknown or repeated key
// is an error that names it; passwords never appear in errors or logs.
// Subscription.Options take "share" ([OptionShare]) and "dlq"
// ([OptionDLQ]).
//
// # Delivery semantics
//
// A stream declares this [transport.Semantics] ([Transport.Declare] says
// it before Subscribe), on both protocols:
//
//   - Ordering per-topic: a group is one persistent session, and within a
//     session the messages of one topic arrive in publish order (MQTT's
//     ordered-topic guarantee). Across the topics of a wildcard there is no
//     order. The Key travels with the message, so the Router keeps per-key
//     order with concurrency across keys. On MQTT 5 the subscription's
//     MaxInFlight (the Router's) is the Receive Maximum: the broker sends
//     at most that many unacknowledged messages. A shared subscription
//     (share=true) declares Ordering none, with an OrderingHint naming
//     share=false: its members split each topic between them.
//   - Ack in-order: MQTT requires acknowledgements in the order the
//     messages arrived, so the stream holds a message's PUBACK (PUBREC at
//     QoS 2) until every earlier message of its connection is acked.
//     Acknowledgements are sent as soon as they are contiguous (no timer);
//     those due together leave together. A crash loses the held ones: the
//     broker redelivers those messages, never loses them.
//   - Redelivery on-reconnect: the broker redelivers an unacked message
//     only when the session reconnects (a stream closed and opened again
//     with the same client ID, a restarted process, a dropped connection).
//     A PUBACK with an MQTT 5 error reason code is not a redelivery request
//     (the broker drops the message), so Nack is unsupported: it returns an
//     error wrapping errors.ErrUnsupported and leaves the delivery
//     unsettled. The Router then re-runs the message in process after the
//     delay, with its key held; retry middleware and dead-lettering bound
//     that. An Ack of a delivery whose connection is gone returns an error
//     wrapping [transport.ErrRevoked]: the broker redelivers it.
//   - FanOut true: every group (one session, or one shared subscription)
//     receives every message of the topic.
//   - NackDelay, Attempts, Extend, NativeDLQ and Replay are false: MQTT has
//     no delayed redelivery, no delivery count (Facts.Attempt is 1, or 2
//     for a message the broker flags as a duplicate), no leases, no DLQ
//     and no history beyond a topic's retained message.
//   - Headers is true with the properties and the envelope, false with raw.
//   - MaxPayload is [MaxPayload] (1 MiB by default).
//   - RedeliveryDelay is 0: redelivery happens as the session reconnects.
//
// # Sessions and client IDs
//
// Each subscription has a connection and a persistent session of its own
// (clean session false on 3.1.1; clean start false and a Session Expiry
// Interval on MQTT 5), named by its client ID: Subscription.Consumer, or
// one derived from Group and Topic, stable across restarts. The broker
// queues the session's messages while it is away and redelivers what it
// had not acked, across a broker restart too (with Mosquitto's persistence
// on). By default a Group is that one session; share=true makes it a
// shared subscription, $share/<group>/<topic>, whose members each have a
// session: Mosquitto 2.0 does not keep shared subscriptions across its
// restart, so messages published after a restart and before the members
// subscribe again are lost for the group.
//
// Two live connections with one client ID take the session from each
// other at the broker. Within a Transport, Subscribe refuses a client ID
// one of its streams holds. Across Transports and processes, each stream
// publishes a claim (retained, on ferry/session/<hash of the client ID>)
// before it connects, and its Transport's publishing connection watches
// that topic: a stream that sees a newer claim logs it at level Error,
// stops without reconnecting, and returns [ErrTakenOver] (an
// [transport.ErrRevoked]) from Receive and from the settles of what it
// held. On MQTT 5 a DISCONNECT with reason code 0x8E (session taken over)
// from the broker does the same. The newer stream keeps the session and
// gets the unacked messages. Before a stream reconnects, a round trip on
// the publishing connection makes sure it has seen any claim sent before
// it was disconnected. [Transport.RemoveSession] clears a claim with its
// session. A client needs the broker's permission to publish and subscribe
// under ferry/session/; without it a stream logs a warning and runs
// without claims.
//
// After a lost connection a stream reconnects (at once, then 1s doubling
// up to [MaxReconnectInterval]) and subscribes again; a subscription the
// broker then refuses is reported by Receive, which tries again on its
// next call.
//
// # Messages the broker drops
//
// Mosquitto keeps at most max_queued_messages (1000 by default) QoS 1
// messages for a session beyond its in-flight window, and drops the rest
// silently, for a consumer that is away or merely behind. Ferry cannot
// change the broker's configuration, but it sees the loss: every message
// carries its publisher's ID and a sequence number per topic (user
// property ferry-seq, "<publisher>:<n>", or the envelope), and a stream that
// is its session's only consumer logs each gap at level Error and counts
// it in [Transport.Missing]. Raw payloads and shared subscriptions cannot
// see gaps.
//
// # Wire formats
//
// Properties (the MQTT 5 default): the MQTT payload is Message.Payload,
// byte for byte. The ID is the user property ferry-id, the Key ferry-key
// (omitted when empty), each header a user property of its name, except
// the headers that stand for MQTT 5 properties: [HeaderContentType]
// (Content Type), [HeaderCorrelationID] (Correlation Data),
// [HeaderReplyTo] (Response Topic), [HeaderMessageExpiry] (Message Expiry
// Interval: a publish option, whole seconds; on receive, what is left)
// and [HeaderPayloadFormat] (Payload Format Indicator). A message without
// ferry-id, from a device or mosquitto_pub, gets its ID from [IDFrom] and
// its Key from [KeyFrom], and its user properties as headers. Publish
// refuses, with [ErrInvalidMessage] naming the field, what a broker would
// refuse or a property could not carry back byte for byte: an empty ID;
// text with invalid UTF-8, NUL, control characters or non-characters; a
// string over 65,535 bytes; a header named ferry-id, ferry-key or
// ferry-seq; a property header with a value its property cannot carry.
//
// Envelope (the MQTT 3.1.1 default): the payload is a JSON object,
//
//	{"ferry":1,"id":"evt-1","key":"device-7","headers":{"k":"v"},"text":"{\"order\":42}","pub":"3f9c0a1b7d2e4f60","seq":42}
//
// where ferry is the format version (1); id is required; key and headers
// are optional; the Message's Payload is text, a JSON string, when it is
// valid UTF-8, or else payload, standard base64; pub is the publishing
// Transport's random ID and seq its sequence number for the topic
// (optional for other writers). Unknown or repeated fields are rejected. A
// payload on an envelope subscription that is not a valid envelope is a
// permanent error wrapping [ErrMalformedEnvelope]: the stream publishes
// it, unchanged, to the subscription's DLQ with the dead-letter record
// and acks it; the handler never sees it. Publish refuses, with
// [ErrInvalidMessage], a Message the envelope would not carry byte for
// byte: an empty ID, or an ID, Key or header that is not valid UTF-8, or
// an MQTT 5 publish option it cannot apply.
//
// Raw ([PayloadFormat](Raw), format=raw): the MQTT payload is
// Message.Payload, byte for byte; the topic is Message.Topic. Nothing
// else travels. A subscriber computes Message.ID with [IDFrom]
// ([ContentHash] of topic and payload by default, or a JSON field) and
// Message.Key with [KeyFrom] (the topic by default, a topic level, or a
// JSON field). Headers are nil. Publish refuses, with
// [ErrInvalidMessage], headers, and an ID or Key other than what those
// functions compute.
//
// Dead letters always carry their headers (properties, or the envelope on
// MQTT 3.1.1), so that their error record does too. A subscription's DLQ
// is a topic, [Transport.DLQName]: "ferry/dlq/<group>" by default
// ([DLQPrefix], [OptionDLQ]), kept by a persistent session of its own
// ("ferry-dlq-<hash>") that Ferry creates before the first dead letter is
// published, so that the broker keeps dead letters while nobody reads
// them. [Transport.ListDLQ] and [Transport.ReplayDLQ] read that session.
//
// # Errors
//
// A refusal by the broker that carries an MQTT 5 reason code is a
// [*ReasonError], matched by errors.Is against [ErrNotAuthorized],
// [ErrBadCredentials], [ErrQuotaExceeded], [ErrPayloadFormatInvalid],
// [ErrPacketTooLarge], [ErrTopicNameInvalid] and [ErrServerUnavailable].
// A refused publish was not written: it is not an unknown outcome.
//
// # Not supported
//
//   - Nack (errors.ErrUnsupported): MQTT has no negative acknowledgement
//     that redelivers.
//   - QoS 0: every publish and subscription is QoS 1 or 2 (a QoS 0 message
//     from another client is delivered and its Ack does nothing).
//   - Subscription.StartAtOldest (no history); on MQTT 3.1.1
//     Subscription.MaxInFlight (the broker's max_inflight_messages sets the
//     window, 20 by default in Mosquitto).
//   - Headers with raw payloads.
//   - WebSocket URLs (ws://, wss://).
package mqtt
