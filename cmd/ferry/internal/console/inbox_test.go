package console_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/ferrymq/ferry/cmd/ferry/internal/console"
	"github.com/ferrymq/ferry/cmd/ferry/internal/ops"
	"github.com/ferrymq/ferry/internal/testenv"
	"github.com/ferrymq/ferry/store/pgstore"
)

// TestInbox: against PostgreSQL, the console counts an inbox's records per
// namespace (done, done recently, in progress, abandoned), lists the
// abandoned claim as stuck, and tells for a message ID whether it was
// processed, through the same ops.OpenInbox as `ferry console --inbox`.
func TestInbox(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pool := testenv.Postgres(t, 4)
	table := "console_inbox_" + suffix()
	if err := pgstore.MigrateIdempotency(ctx, pool, table); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+table) })

	// inventory: a transactional inbox with two messages processed.
	in, err := pgstore.NewInbox(pool, pgstore.Table(table), pgstore.Namespace("inventory"))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"order-1-placed", "order-2-placed"} {
		tx, c, err := in.Begin(ctx, id)
		if err != nil || tx == nil {
			t.Fatalf("begin %s: %v %v", id, c, err)
		}
		if err := tx.Commit(ctx, []byte("ok")); err != nil {
			t.Fatal(err)
		}
	}
	// email: lease mode, one done, one in progress, one abandoned (its
	// holder's lease of 20ms ended without Complete).
	email, err := pgstore.NewStore(pool, pgstore.Table(table), pgstore.Namespace("email"), pgstore.Lease(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	c, err := email.Claim(ctx, "mail-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := email.Complete(ctx, "mail-1", c.Token, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := email.Claim(ctx, "mail-2"); err != nil {
		t.Fatal(err)
	}
	short, err := pgstore.NewStore(pool, pgstore.Table(table), pgstore.Namespace("email"), pgstore.Lease(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := short.Claim(ctx, "mail-3"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)

	u, err := url.Parse(testenv.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("table", table)
	u.RawQuery = q.Encode()
	opened, err := ops.OpenInbox(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer opened.Close()
	addr := run(t, console.Config{Listen: "127.0.0.1:0", Monitor: &recorder{}, Inbox: console.InboxOf(opened)})

	rep := call(t, "GET", addr, "/api/inbox", "")
	if rep.code != 200 {
		t.Fatalf("inbox: %d %v", rep.code, rep.body)
	}
	got := map[string][4]float64{}
	for _, n := range rep.body["namespaces"].([]any) {
		m := n.(map[string]any)
		got[m["namespace"].(string)] = [4]float64{m["done"].(float64), m["done_recent"].(float64), m["in_progress"].(float64), m["abandoned"].(float64)}
	}
	// done, done recently, in progress, abandoned
	if len(got) != 2 || got["inventory"] != [4]float64{2, 2, 0, 0} || got["email"] != [4]float64{1, 1, 1, 1} {
		t.Errorf("namespaces %v, want inventory 2 done; email 1 done, 1 in progress, 1 abandoned", got)
	}
	stuck, _ := rep.body["stuck"].([]any)
	if len(stuck) != 1 || stuck[0].(map[string]any)["id"] != "mail-3" || stuck[0].(map[string]any)["lease_left"].(float64) >= 0 {
		t.Errorf("stuck %v, want mail-3 with its lease ended", stuck)
	}

	for _, c := range []struct{ ns, id, state string }{
		{"inventory", "order-1-placed", "done"},
		{"inventory", "order-3-placed", "unknown"},
		{"email", "order-1-placed", "unknown"}, // another namespace
		{"email", "mail-2", "in-progress"},
		{"email", "mail-3", "abandoned"},
	} {
		rep := call(t, "GET", addr, "/api/inbox/lookup?namespace="+c.ns+"&id="+c.id, "")
		if rep.code != 200 || rep.body["state"] != c.state || rep.body["id"] != c.id {
			t.Errorf("lookup %s in %s: %d %v, want %s", c.id, c.ns, rep.code, rep.body, c.state)
		}
	}
	if rep := call(t, "GET", addr, "/api/inbox/lookup?namespace=email&id=", ""); rep.code != 400 {
		t.Errorf("lookup without an ID: %d %v, want 400", rep.code, rep.body)
	}
}
