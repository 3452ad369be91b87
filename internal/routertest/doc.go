// Package routertest runs a real Router over a memory broker in tests: the
// set-up the store conformance kits (idempotencytest, parkingtest) share.
package routertest
