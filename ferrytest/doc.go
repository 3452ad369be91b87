// Package ferrytest runs a [ferry.Router] in tests, as net/http/httptest
// runs a server: [Start] runs the Router in the background, returns once
// every subscription is open, and stops it when the test ends.
//
//	r, _ := ferry.NewRouter()
//	_ = r.Add("inventory", broker, sub, h)
//	rr := ferrytest.Start(t, r)
//	// publish, then wait for the handler's effects
//	if err := rr.Close(ctx); err != nil { // optional: the cleanup closes it too
//		t.Fatal(err)
//	}
//
// It is meant for application tests and for Ferry's own: use it with the
// memory transport (transport/memory) for tests that need no broker.
package ferrytest
