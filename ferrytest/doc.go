// Package ferrytest tests Ferry applications: it runs a [ferry.Router] in
// a test ([Start]), and it runs application handlers, with the real Router
// and middleware, on a simulated broker that does to them, from a seed,
// what a real broker may do ([Check]).
//
// # Start
//
// [Start] runs a Router in the background, as net/http/httptest runs a
// server: it returns once every subscription is open, and stops the
// Router when the test ends.
//
//	r, _ := ferry.NewRouter()
//	_ = r.Add("inventory", broker, sub, h)
//	rr := ferrytest.Start(t, r)
//	// publish, then wait for the handler's effects
//	if err := rr.Close(ctx); err != nil { // optional: the cleanup closes it too
//		t.Fatal(err)
//	}
//
// # The simulator
//
// The hard bugs of a handler are in what the broker does to it:
// duplicates, redelivery after a crash, reordering, a retry storm. [Check]
// runs a scenario for many seeds (1,000 by default), each on a simulated
// broker with a virtual clock, and fails the test with the first seed
// whose run broke an invariant:
//
//	ferrytest.Check(t, ferrytest.Like("kafka"), func(s *ferrytest.Sim) {
//		s.Input(orders...)                              // what the producer publishes
//		inbox := s.NewInbox()                           // the dedupe store (the database)
//		s.Consumer("inventory", sub, func(p *ferrytest.Process) (handler.Handler, error) {
//			mw, err := middleware.Recommended(s, middleware.Deduplicate(inbox))
//			if err != nil {
//				return nil, err
//			}
//			return mw(reserve(fakeStock{s})), nil // the handler under test
//		})
//		s.Expect(ferrytest.OneEffect("reserve"), ferrytest.NothingLost("reserve", "inventory", nil))
//	})
//
// The scenario function runs once per seed, in a synctest bubble of its
// own (package testing/synctest): everything it makes is fresh for each
// run, and time in the run is virtual, so a run of a minute of broker
// time takes a millisecond. The handler's dependencies are fakes that
// report their effects to the run with [Sim.Effect], and the places where
// a process may die or wait with [Sim.Point]. The report of a failing
// seed names the invariant, the message, the faults injected on it and
// its trace, and the line that replays it:
//
//	FERRYTEST_SEED=17 go test -run '^TestInventory$' ./inventory
//
// # The run
//
// A run has a producer (it publishes the scenario's [Sim.Input] one at a
// time, as an outbox relay does, and publishes a message again with the
// same ID when a publish failed or its outcome is unknown), and for each
// [Sim.Consumer] a group of processes ([Members], 2 by default), each a
// real Router running the subscription with the scenario's handler chain,
// with ferry.Concurrency(1) and ferry.MaxInFlight(1). A scheduler decides,
// step by step and by the seed, what happens next: which pending message
// goes to which waiting process, whether the producer publishes, whether a
// handler waiting at a point resumes, whether a crashed process restarts.
// Between decisions exactly one process runs handler code (its turn), from
// the delivery to the settle or to its next point. A run ends when nothing
// is left to do, and then the invariants are checked.
//
// # What the simulated broker does
//
// It declares the profile's [transport.Semantics] on its streams (the
// Router and the middleware adapt to them as to the real transport) and
// obeys them:
//
//   - Ordering: with none, any pending message may come next, even of one
//     key. With per-key order, a key's messages are first delivered in
//     publish order and keys interleave at random; with per-topic order,
//     the whole topic is. A message redelivered after a crash or a lease's
//     end comes back in its place, before the later messages of its key; a
//     message the consumer nacked does not hold them back (as the Router
//     documents: a Nack lets the key's later messages pass).
//   - Redelivery: on-nack brokers redeliver a Nack after its delay (at
//     once where NackDelay is false) and a crashed process's delivery after
//     RedeliveryDelay, to any member; on-reconnect brokers (MQTT) refuse
//     Nack with errors.ErrUnsupported, so the Router retries in process,
//     and give a crashed process's delivery to that member's next process
//     only; a broker that never redelivers loses it.
//   - Attempts: Facts.Attempt is the broker's delivery count, or, where
//     Attempts is false, the process's own, restarting at 1 in a new one.
//   - NativeDLQ: after [Profile].DeliveryLimit deliveries the broker moves
//     a message to the group's DLQ ([transport.DLQName]) by itself.
//   - FanOut false (a plain SQS queue): all subscriptions to a topic share
//     one group. Headers false: headers are dropped. MaxPayload: a larger
//     publish fails with transport.ErrTooLarge. Extend: deliveries
//     implement transport.Extender.
//
// And it injects, where the profile allows and [Faults] asks (all by
// default), these [Fault]s: a Duplicate (an ack lost: the message comes
// again); CrashBefore and CrashAfter (the process dies at a receive, at a
// point, before or after an effect, at an inbox commit, or before its ack
// reaches the broker: its Router is torn down, the broker redelivers, and
// the member restarts later); Reorder (the choice above; off, the oldest
// message goes first); Delay (a redelivery later than asked);
// LeaseExpiry, where the broker redelivers on Nack (the broker gives a
// delivery to another member while its handler waits at a point, or
// before its ack; the ack then fails); Unavailable and UnknownOutcome on
// publish (the producer's and the handlers', such as dead-lettering);
// Transient (a point fails once with [ErrInjected]); and Pause (a handler
// waits at a point while the others run).
//
// A crash ends the handler's goroutine with runtime.Goexit, so deferred
// calls run (unlock with defer); what the process's build function made is
// lost with it, what the scenario made (the stores, the fakes) survives, as
// a database does. A transaction the process left open in an [Inbox], or
// in a store wrapped with [Sim.TxStore], is rolled back.
//
// # Profiles
//
// A [Profile] is a transport's declared Semantics. [Like] takes a name,
// [FromURL] a URL's scheme, [Declared] any transport.Declarer; [Profiles]
// lists the table. The table is a copy of what each transport of this
// module declares with its default configuration, kept in this package so
// that a test of a handler needs no broker and compiles no broker client;
// its test opens each transport and compares, so the copy cannot drift.
// Subscription options that change what a transport declares select the
// variant ([Profile.For]): RabbitMQ's "ordered" and Redis's "mode".
//
// # Invariants
//
// [OneEffect] (no event applied twice), [KeyOrder] (each key's effects in
// publish order), [NothingLost] (every event applied, dead-lettered or
// parked) and [Func] (anything else the scenario's fakes can tell) are
// checked at the end of a run; the first that fails is the run's
// [Violation]. Dead letters are recognised by their failure record
// (transport.ReadDeadLetter), parked messages by the lots given to
// [Sim.ParkedIn].
//
// # Determinism
//
// A run is a function of its seed: the same seed, scenario, options and
// code give the same trace ([Run.Fingerprint]), the same violation and the
// same virtual time. What makes it so: the scheduler draws every decision
// from a PCG generator seeded by the seed; only one process runs handler
// code at a time, so calls into the broker, the stores and the fakes come
// in one order; the clock is synctest's, which moves only when every
// goroutine of the run waits; and after each turn the clock moves to the
// next multiple of the [Quantum] (1s), and redeliveries are due at
// multiples of it, so that the random jitter the Router's backoff and the
// retry middleware draw (from math/rand/v2, which cannot be seeded) never
// shows at a decision.
//
// What is not deterministic, precisely: (1) a turn whose waits add up to
// a quantum or more (recorded in [Run].Hazards), or a jittered Nack delay
// of a quantum or more (the Router's backoff after a message's fourth
// failure in a row), can move the clock differently in a replay, which
// matters if a later outcome depends on the clock (a dedupe lease ending):
// raise the Quantum; (2) handler or fake code that is itself
// nondeterministic: its own goroutines, map iteration that decides
// something, math/rand, real I/O to a shared server (a database is fine if
// each run has its own rows); (3) the Router's own background goroutines
// (the stuck-call watch) run when they will, but only log. The package's
// tests replay 300 seeds on three profiles and compare fingerprints.
//
// # Limits
//
// The simulator explores the interleavings of processes, one delivery in
// flight per process, not the concurrency within one process (the Router's
// per-key sequencing is tested by the conformance suite). It knows a
// broker only through its Semantics: what a transport does beyond them
// (the SQS FIFO group lock after a Nack, Kafka's partition assignment,
// retention) is not simulated, and where Semantics allow more than a
// broker does, the simulator does the more. Effects and points are what
// the fakes report: code between them runs as it is. A handler that
// blocks for ever on something outside the run (not the virtual clock, not
// another part of the run) ends the run with synctest's deadlock report.
package ferrytest
