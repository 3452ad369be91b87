package kafka_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// TestStartPinned: a group starting at the log end (the default) commits
// its start position when it is first assigned, so a partition that moves
// to another member before anything was committed does not skip the
// messages published in between.
func TestStartPinned(t *testing.T) {
	addrs := newCluster(t, 1)
	createTopic(t, addrs, "pin", 1)
	trA, trB := open(t, addrs), open(t, addrs)
	sub := transport.Subscription{Topic: "pin", Group: "g"} // starts at the end
	stA := subscribe(t, trA, sub)
	publishAll(t, trA, []*handler.Message{{ID: "0", Topic: "pin"}, {ID: "1", Topic: "pin"}, {ID: "2", Topic: "pin"}})
	if err := stA.Close(ctxT(t, 10*time.Second)); err != nil { // nothing received, nothing acked
		t.Fatal(err)
	}
	stB := subscribe(t, trB, sub)
	if got := ids(receive(t, stB, 3)); fmt.Sprint(got) != "[0 1 2]" {
		t.Errorf("the next member received %v, want [0 1 2]", got)
	}
}

// TestCloseBehindUnfinished: Close commits each partition's finished
// prefix and no further. Messages acked behind one left unfinished are
// delivered again to the next member, and the others are not: a restart
// with a message stuck in a handler duplicates what finished after it in
// its partition (what examples/order-service sees with -faults).
func TestCloseBehindUnfinished(t *testing.T) {
	addrs := newCluster(t, 1)
	createTopic(t, addrs, "behind", 1)
	tr := open(t, addrs)
	var msgs []*handler.Message
	for i := range 5 {
		msgs = append(msgs, &handler.Message{ID: strconv.Itoa(i), Key: "k" + strconv.Itoa(i), Topic: "behind"})
	}
	publishAll(t, tr, msgs)
	sub := transport.Subscription{Topic: "behind", Group: "g", StartAtOldest: true}
	st := subscribe(t, tr, sub)
	ctx := ctxT(t, 20*time.Second)
	for i := range 5 {
		d, err := st.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if i != 2 { // 2 stays in its handler
			if err := d.Ack(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := st.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if lag, err := tr.Lag(ctx, sub); err != nil || len(lag) != 1 || lag[0].Messages != 3 {
		t.Errorf("lag %v (%v) once Close returned; want 3 (0 and 1 committed by Close)", lag, err)
	}
	st2 := subscribe(t, open(t, addrs), sub)
	if got := ids(receive(t, st2, 3)); fmt.Sprint(got) != "[2 3 4]" {
		t.Errorf("after the restart: %v, want [2 3 4] (2 unfinished, 3 and 4 behind it)", got)
	}
}
