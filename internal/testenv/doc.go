// Package testenv connects tests to the machine's PostgreSQL and Redis: one
// place for their URLs (overridable with FERRY_POSTGRES_URL and
// FERRY_REDIS_URL) and for skipping, or failing under
// FERRY_REQUIRE_BROKERS=1, when a server is unreachable.
package testenv
