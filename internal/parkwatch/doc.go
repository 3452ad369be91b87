// Package parkwatch is the shared core of the parking lots that follow
// their parked keys from their store's notifications (pgstore's
// LISTEN/NOTIFY, redisstore's PUBLISH): per subscription, the keys read
// after the last notification about it, answered from memory only while
// the notification connection is known to be up. The store supplies the
// connection (a session) and the read; this package owns the state, the
// reconnects and the resync. It implements parking.Watcher's contract.
package parkwatch
