// Package testcerts makes certificate authorities and server
// certificates for tests that start a private broker with TLS: a wrong CA
// must fail, the right one connect. Everything is generated in the test
// (crypto/x509, ECDSA P-256), valid for an hour, and written as PEM files
// into a directory the test owns.
package testcerts
