// Package credleak holds the test that no transport prints a credential.
// It has no code of its own; its test, TestNoCredentialLeaks, runs every
// transport's failure paths (a bad option, an unknown key, a host that
// refuses the connection, wrong credentials against the real broker, a
// publish after Close, a subscription with bad options) with secrets in
// every part of the URL (user, password, query values, an endpoint with
// user-info), and searches every error and every log line (the
// transport's injected logger, slog.Default and the process's standard
// error) for them. The Watermill bridge takes no URL, and is not in it.
package credleak
