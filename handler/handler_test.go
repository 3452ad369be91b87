package handler

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestPermanent(t *testing.T) {
	cause := errors.New("bad sku")
	err := fmt.Errorf("reserve: %w", Permanent(cause))
	if !errors.Is(err, ErrPermanent) || !IsPermanent(err) {
		t.Fatalf("Is(ErrPermanent) = false for %v", err)
	}
	if !errors.Is(err, cause) {
		t.Fatalf("cause lost in %v", err)
	}
	var pe *PermanentError
	if !errors.As(err, &pe) || pe.Err != cause {
		t.Fatalf("As(*PermanentError) failed")
	}
	if Permanent(nil) != nil {
		t.Fatal("Permanent(nil) != nil")
	}
	if IsPermanent(cause) {
		t.Fatal("plain error reported permanent")
	}
	if got := Class(err); got != "permanent" {
		t.Fatalf("Class = %q", got)
	}
}

func TestRetryAfter(t *testing.T) {
	cause := errors.New("rate limited")
	err := fmt.Errorf("call: %w", RetryAfter(cause, 3*time.Second))
	d, ok := RetryDelay(err)
	if !ok || d != 3*time.Second {
		t.Fatalf("RetryDelay = %v, %v", d, ok)
	}
	if !errors.Is(err, ErrRetryAfter) || !errors.Is(err, cause) {
		t.Fatal("Is chain broken")
	}
	if _, ok := RetryDelay(cause); ok {
		t.Fatal("RetryDelay found a delay in a plain error")
	}
	if d, _ := RetryDelay(RetryAfter(cause, -time.Second)); d != 0 {
		t.Fatalf("negative delay kept: %v", d)
	}
	if RetryAfter(nil, time.Second) != nil {
		t.Fatal("RetryAfter(nil) != nil")
	}
	if got := Class(err); got != "retry-after" {
		t.Fatalf("Class = %q", got)
	}
}

func TestClass(t *testing.T) {
	cases := map[string]error{
		"ok":        nil,
		"transient": errors.New("x"),
		"canceled":  fmt.Errorf("w: %w", context.Canceled),
		"deadline":  context.DeadlineExceeded,
		"panic":     &PanicError{Value: "boom"},
	}
	for want, err := range cases {
		if got := Class(err); got != want {
			t.Errorf("Class(%v) = %q, want %q", err, got, want)
		}
	}
}

func TestChainOrderAndNil(t *testing.T) {
	var got []string
	mw := func(s string) Middleware {
		return func(next Handler) Handler {
			return HandlerFunc(func(ctx context.Context, m *Message) error {
				got = append(got, s)
				return next.Handle(ctx, m)
			})
		}
	}
	h := Chain(mw("a"), nil, mw("b"), mw("c"))(HandlerFunc(func(context.Context, *Message) error {
		got = append(got, "h")
		return nil
	}))
	if err := h.Handle(context.Background(), &Message{}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[a b c h]" {
		t.Fatalf("order %v", got)
	}
}

func TestDecodePermanent(t *testing.T) {
	calls := 0
	h := JSON(func(ctx context.Context, m *Message, v struct{ N int }) error { calls++; return nil })
	err := h.Handle(context.Background(), &Message{ID: "m1", Payload: []byte("not json")})
	var de *DecodeError
	if !IsPermanent(err) || !errors.As(err, &de) || de.ID != "m1" {
		t.Fatalf("decode failure not permanent DecodeError: %v", err)
	}
	if calls != 0 {
		t.Fatal("fn called on decode failure")
	}
	if err := h.Handle(context.Background(), &Message{Payload: []byte(`{"N":1}`)}); err != nil || calls != 1 {
		t.Fatalf("good payload: err=%v calls=%d", err, calls)
	}
}

func TestCloneSharesNothing(t *testing.T) {
	m := &Message{ID: "1", Payload: []byte("ab"), Headers: map[string]string{"k": "v"}}
	m.SetFacts(Facts{Attempt: 2})
	c := m.Clone()
	c.Payload[0] = 'x'
	c.Headers["k"] = "w"
	if string(m.Payload) != "ab" || m.Headers["k"] != "v" || c.Attempt() != 2 {
		t.Fatal("clone shares state or lost facts")
	}
}
