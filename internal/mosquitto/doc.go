// Package mosquitto starts private Mosquitto brokers for Ferry's tests.
//
// The machine's shared Mosquitto runs with the default
// max_queued_messages (1000): for a QoS 1 session that falls further
// behind, it drops the rest, silently. A test that must see every message
// starts a broker of its own with [Start], configured with
// max_queued_messages 0 (no limit) and persistence in a temporary folder,
// on a free loopback port. It needs the mosquitto program (Debian package
// mosquitto); without it the test is skipped, or fails when
// FERRY_REQUIRE_BROKERS=1.
package mosquitto
