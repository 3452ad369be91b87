// Package ops is the operations layer of the ferry command and its web
// console: typed functions over a transport URL and a parking lot DSN for
// dead letters (list, show, replay, purge), parked keys (list, show,
// release by request, drop), lag, offsets resets, publish, tail and the
// semantics table. The commands and the console format what these return;
// neither talks to a broker or a store directly.
//
// It opens every transport Ferry ships by its URL scheme (the transport
// packages are imported here for their registration), and a lot by its DSN
// (postgres:// or redis://).
//
// Errors name what failed and never carry a URL's credentials: URLs appear
// only as [transport.RedactString] prints them.
package ops
