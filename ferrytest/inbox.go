package ferrytest

import (
	"context"
	"fmt"
	"sort"

	"github.com/ferrymq/ferry/idempotency"
)

// An Inbox is a transactional dedupe store in the run's memory: an
// [idempotency.TxStore] that behaves, under the simulator's faults, as
// the PostgreSQL inbox (store/pgstore) does under real ones. The dedupe
// middleware claims each key in a transaction; effects the handler
// reports with [Sim.Effect] inside it are staged in the transaction and
// take effect when it commits, together with the claim, or never: a crash
// before the commit rolls both back (the process's connection closes).
// So a handler deduplicated with an Inbox applies each effect exactly
// once whatever the broker does, and a test can say so of a thousand
// seeds in seconds, with no database.
//
// Make one per consumer with [Sim.NewInbox], in the scenario function (it
// is the database: it survives crashes). Its commit is a fault point: the
// process may crash just before or just after it, or the commit may
// return an error wrapping [ErrInjected] although it happened (an unknown
// outcome, which the dedupe middleware hands back for redelivery).
//
// A claim of a key whose transaction is open elsewhere answers
// InProgress at once, with the lease ending one quantum later (pgstore
// waits a little for the other transaction first). As with pgstore, a
// retry inside the transaction keeps only the writes of the last attempt,
// none if it wrote nothing.
type Inbox struct {
	sim  *Sim
	keys map[string]*inboxKey
}

type inboxKey struct {
	done   bool
	result []byte
	tx     *inboxTx // the open transaction holding the key
	token  string   // a claim without transaction ([Inbox.Claim]) holding the key
	holder *member  // and its process
	life   int
}

type inboxTx struct {
	in      *Inbox
	key     string
	owner   *member
	life    int
	attempt int               // the attempt that staged last
	call    *idempotency.Call // the dedupe call, whose Attempt is the current one
	staged  []staged
	ended   bool
}

type staged struct{ ledger, id, proc string }

var _ idempotency.TxStore = (*Inbox)(nil)

// NewInbox returns an empty Inbox of the run.
func (s *Sim) NewInbox() *Inbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := &Inbox{sim: s, keys: map[string]*inboxKey{}}
	s.inboxes = append(s.inboxes, in)
	return in
}

func (in *Inbox) key(k string) *inboxKey {
	r := in.keys[k]
	if r == nil {
		r = &inboxKey{}
		in.keys[k] = r
	}
	return r
}

// Begin implements [idempotency.TxStore]: it opens a transaction and
// claims key in it.
func (in *Inbox) Begin(ctx context.Context, key string) (idempotency.InboxTx, idempotency.Claim, error) {
	s := in.sim
	if err := ctx.Err(); err != nil {
		return nil, idempotency.Claim{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.turn
	if st == nil {
		return nil, idempotency.Claim{}, ErrNotInTurn
	}
	k := in.key(key)
	switch {
	case k.done:
		return nil, idempotency.Claim{State: idempotency.Done, Result: append([]byte(nil), k.result...)}, nil
	case k.tx != nil || k.token != "":
		return nil, idempotency.Claim{State: idempotency.InProgress, Until: s.start.Add(s.clock() + s.cfg.quantum)}, nil
	}
	tx := &inboxTx{in: in, key: key, owner: st.m, life: st.m.life}
	k.tx = tx
	return tx, idempotency.Claim{State: idempotency.New, Token: "tx"}, nil
}

// stage adds an effect of the call's current attempt to the transaction,
// dropping those of earlier attempts (their savepoint was rolled back).
func (tx *inboxTx) stage(ledger, id string, c *idempotency.Call, proc string) {
	if a := c.Attempt(); a != tx.attempt {
		tx.staged, tx.attempt = tx.staged[:0], a
	}
	tx.call = c
	tx.staged = append(tx.staged, staged{ledger: ledger, id: id, proc: proc})
}

// Commit commits the claim and the staged effects, or crashes or fails
// around it as the faults say.
func (tx *inboxTx) Commit(ctx context.Context, result []byte) error {
	s := tx.in.sim
	s.mu.Lock()
	if tx.ended {
		s.mu.Unlock()
		return fmt.Errorf("ferrytest: inbox commit %q: the transaction has ended", tx.key)
	}
	st := s.turn
	where := fmt.Sprintf("at the inbox commit of %s", tx.key)
	if st != nil && s.chance(CrashBefore, pCommitFault) {
		s.mu.Unlock()
		s.crash(st, CrashBefore, where)
	}
	tx.ended = true
	k := tx.in.key(tx.key)
	k.tx, k.done, k.result = nil, true, append([]byte(nil), result...)
	if tx.call != nil && tx.call.Attempt() != tx.attempt {
		tx.staged = nil // the last attempt wrote nothing; an earlier one failed after writing: keep none
	}
	for _, e := range tx.staged {
		s.effectLocked(e.ledger, e.id, e.proc)
	}
	if st != nil && s.chance(UnknownOutcome, pCommitFault) {
		s.event(Event{What: "commit", Fault: UnknownOutcome, ID: st.curID(), Key: st.curKey(), Process: st.m.String(), Detail: "committed, but the answer was lost"})
		s.mu.Unlock()
		return fmt.Errorf("ferrytest: inbox commit %q: connection lost; it may have committed: %w", tx.key, ErrInjected)
	}
	crash := st != nil && s.chance(CrashAfter, pCommitFault)
	s.mu.Unlock()
	if crash {
		s.crash(st, CrashAfter, "just after the inbox commit of "+tx.key)
	}
	return nil
}

// Rollback discards the claim and the staged effects.
func (tx *inboxTx) Rollback(ctx context.Context) error {
	s := tx.in.sim
	s.mu.Lock()
	defer s.mu.Unlock()
	tx.rollbackLocked()
	return nil
}

func (tx *inboxTx) rollbackLocked() {
	if tx.ended {
		return
	}
	tx.ended = true
	if k := tx.in.keys[tx.key]; k != nil && k.tx == tx {
		k.tx = nil
	}
}

// rollbackOf rolls back the open transactions of m's process, which
// crashed: its connection is gone.
func (in *Inbox) rollbackOf(m *member) {
	keys := make([]string, 0, len(in.keys))
	for key := range in.keys {
		keys = append(keys, key)
	}
	sort.Strings(keys) // the trace must not depend on map order
	for _, key := range keys {
		k := in.keys[key]
		if tx := k.tx; tx != nil && tx.owner == m && tx.life == m.life {
			in.sim.event(Event{What: "rollback", Process: m.String(), Detail: "the crashed process's open inbox transaction on " + tx.key})
			tx.rollbackLocked()
		}
		if k.token != "" && k.holder == m && k.life == m.life {
			in.sim.event(Event{What: "rollback", Process: m.String(), Detail: "the crashed process's claim on " + key})
			k.token = ""
		}
	}
}

// Claim implements [idempotency.Store] without a transaction, for a
// caller that hides the TxStore: New, Done, or InProgress while a claim
// or a transaction holds the key. The claim has no lease: Complete,
// Release or the crash of the holder's process ends it.
func (in *Inbox) Claim(ctx context.Context, key string) (idempotency.Claim, error) {
	s := in.sim
	s.mu.Lock()
	defer s.mu.Unlock()
	k := in.key(key)
	switch {
	case k.done:
		return idempotency.Claim{State: idempotency.Done, Result: append([]byte(nil), k.result...)}, nil
	case k.tx != nil || k.token != "":
		return idempotency.Claim{State: idempotency.InProgress, Until: s.start.Add(s.clock() + s.cfg.quantum)}, nil
	}
	k.token = fmt.Sprintf("claim-%d", s.step)
	if st := s.turn; st != nil {
		k.holder, k.life = st.m, st.m.life
	}
	return idempotency.Claim{State: idempotency.New, Token: k.token}, nil
}

// Complete implements [idempotency.Store].
func (in *Inbox) Complete(ctx context.Context, key, token string, result []byte) error {
	s := in.sim
	s.mu.Lock()
	defer s.mu.Unlock()
	k := in.key(key)
	if k.token != token && !k.done {
		return fmt.Errorf("ferrytest: inbox complete %q: %w", key, idempotency.ErrLeaseLost)
	}
	k.token, k.done, k.result = "", true, append([]byte(nil), result...)
	return nil
}

// Release implements [idempotency.Store].
func (in *Inbox) Release(ctx context.Context, key, token string) error {
	s := in.sim
	s.mu.Lock()
	defer s.mu.Unlock()
	k := in.key(key)
	if k.token != token {
		return nil
	}
	k.token = ""
	return nil
}

// TxStore wraps a transactional dedupe store that lives outside the run
// (pgstore.Inbox on a real PostgreSQL) so that it behaves under the
// simulator's crashes as it does under real ones: a transaction that a
// crashed process left open is rolled back when the process is torn down,
// as the database does when the process's connection closes. Without it,
// the crashed process's transaction would hold its key (and a connection)
// for ever. The transactions it returns are the store's own, so the
// store's accessors (pgstore.Tx) work unchanged.
//
// Effects the handler writes in such a transaction are the database's:
// check them with a [Func] invariant that reads the database at the end of
// the run, rather than with [Sim.Effect], which cannot know whether the
// transaction committed. Call [Sim.Point] where the handler writes, so
// that the simulator may crash or pause it there.
func (s *Sim) TxStore(in idempotency.TxStore) idempotency.TxStore {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := &txStore{TxStore: in, sim: s}
	s.external = append(s.external, w)
	return w
}

type txStore struct {
	idempotency.TxStore
	sim  *Sim
	open []openTx // transactions begun, by process; ended ones too (rolling them back again is harmless)
}

type openTx struct {
	tx   idempotency.InboxTx
	key  string
	m    *member
	life int
}

// Begin begins the store's transaction and remembers which process holds
// it.
func (w *txStore) Begin(ctx context.Context, key string) (idempotency.InboxTx, idempotency.Claim, error) {
	tx, c, err := w.TxStore.Begin(ctx, key)
	if tx != nil {
		s := w.sim
		s.mu.Lock()
		if st := s.turn; st != nil {
			w.open = append(w.open, openTx{tx: tx, key: key, m: st.m, life: st.m.life})
		}
		s.mu.Unlock()
	}
	return tx, c, err
}

// rollbackOf rolls back the transactions of m's crashed process. Called
// without s.mu: it does the store's I/O.
func (w *txStore) rollbackOf(m *member, life int) {
	var keep, gone []openTx
	w.sim.mu.Lock()
	for _, o := range w.open {
		if o.m == m && o.life == life {
			gone = append(gone, o)
		} else {
			keep = append(keep, o)
		}
	}
	w.open = keep
	w.sim.mu.Unlock()
	for _, o := range gone {
		_ = o.tx.Rollback(context.Background())
	}
}
