// Package testbrokers gives Ferry's tests their brokers: the shared test
// brokers of this machine behind a documented URL, and private brokers a
// test starts, restarts and stops on its own.
//
// [URL] takes a URL as documented (mqtt://127.0.0.1:1883,
// kafka://127.0.0.1:9092, sqs://?region=us-east-1&endpoint=http://127.0.0.1:4566&allow_plaintext_auth=true)
// and returns the same URL pointed at a broker the test can use: the
// shared servers on 127.0.0.1 for Redis, RabbitMQ and NATS (checked reachable),
// an in-process kfake cluster for Kafka, a private Mosquitto with
// max_queued_messages 0 for MQTT (package mosquitto), and the fauxqs
// emulator for SQS and SNS (package fauxqs, which installs it when npm is
// there). Only the address changes: every query key of the documented URL
// is kept, so that the URLs users read in the README and the docs are the
// ones the tests run.
//
// A test that restarts, kills, freezes or reconfigures a broker never does
// it to a shared one: it starts a private one on a free port with its own
// data, stopped when the test ends: [StartNATS] (nats-server -js),
// [StartRedis] (redis-server, append-only with fsync on every write),
// [StartRabbitMQ] (a RabbitMQ node of its own name and ports) and
// [Kafka] (kfake, in process); package mosquitto does the same for
// Mosquitto.
//
// When a broker cannot be had the test is skipped, or fails with
// FERRY_REQUIRE_BROKERS=1. A test binary that uses SQS or SNS calls
// fauxqs.Main from its TestMain.
package testbrokers
