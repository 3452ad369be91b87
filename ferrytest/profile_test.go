package ferrytest_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/memory"
)

func TestUnknownProfiles(t *testing.T) {
	for _, p := range []ferrytest.Profile{
		ferrytest.Like("activemq"),
		ferrytest.FromURL("stomp://app:s3cret@broker:61613"),
		ferrytest.FromURL("://nothing"),
		{},
	} {
		err := p.Err()
		if !errors.Is(err, ferrytest.ErrUnknownProfile) {
			t.Errorf("profile %q: Err() = %v, want ErrUnknownProfile", p.Name, err)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("the error quotes the URL's password: %v", err)
		}
	}
	if err := ferrytest.Like("activemq").Err(); !strings.Contains(err.Error(), "sqs-fifo") {
		t.Errorf("the error does not list the profiles: %v", err)
	}
}

func TestEveryProfileIsValid(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range ferrytest.Profiles() {
		if err := p.Err(); err != nil {
			t.Errorf("%s: %v", p.Name, err)
		}
		if seen[p.Name] {
			t.Errorf("profile %q twice", p.Name)
		}
		seen[p.Name] = true
		if got := ferrytest.Like(p.Name); got.Name != p.Name || got.Semantics != p.Semantics {
			t.Errorf("Like(%q) = %q", p.Name, got.Name)
		}
	}
}

// TestDeclared: a profile from a configured transport's Declare is what
// the transport declares; here the memory transport, which needs no
// broker, declares what the table says of it.
func TestDeclared(t *testing.T) {
	b, err := memory.New(context.Background(), "memory://?partitions=2")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())
	p := ferrytest.Declared("mine", b, transport.Subscription{Topic: "orders", Group: "g"}, 0)
	if p.Err() != nil || p.Name != "mine" || p.Semantics != ferrytest.Like("memory").Semantics {
		t.Fatalf("Declared = %q %+v (%v), want memory's Semantics", p.Name, p.Semantics, p.Err())
	}
	bad := ferrytest.Declared("bad", b, transport.Subscription{Topic: "orders", Options: map[string]string{"colour": "blue"}}, 0)
	if !errors.Is(bad.Err(), transport.ErrInvalidOption) {
		t.Fatalf("Declared of a subscription the transport refuses: Err() = %v, want ErrInvalidOption", bad.Err())
	}
}
