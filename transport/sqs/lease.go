package sqs

import (
	"context"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// heartbeat extends the leases of unsettled deliveries: every quarter lease
// it extends, by one lease, those with less than half a lease left, until
// MaxExtension has passed since their receipt.
func (s *stream) heartbeat() {
	defer close(s.heartbeatDone)
	tick := max(s.lease/4, 50*time.Millisecond)
	tk := time.NewTicker(tick)
	defer tk.Stop()
	for {
		select {
		case <-s.closed:
			return
		case <-tk.C:
		}
		now := time.Now()
		var due []*delivery
		s.leaseMu.Lock()
		live := s.leased[:0]
		for _, d := range s.leased {
			st := d.state.Load()
			if st == stateSettled || st == stateNackPending || st == stateReleased {
				continue
			}
			live = append(live, d)
			if d.leaseEnd.Sub(now) < s.lease/2 && now.Sub(d.received) < s.so.MaxExtension &&
				d.state.CompareAndSwap(stateUnsettled, stateExtending) {
				due = append(due, d)
			}
		}
		clear(s.leased[len(live):])
		s.leased = live
		s.leaseMu.Unlock()
		for len(due) > 0 {
			n := min(len(due), 10)
			s.extend(due[:n], s.lease)
			due = due[n:]
		}
	}
}

// extend sets the visibility of ds (all in stateExtending) to d from now,
// then returns them to unsettled, or sends the nack that arrived meanwhile.
func (s *stream) extend(ds []*delivery, d time.Duration) {
	entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(ds))
	secs := int32(d / time.Second)
	for i, dl := range ds {
		entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{
			Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(dl.handle), VisibilityTimeout: secs,
		}
	}
	start := time.Now()
	// The call deadline (CallTimeout) bounds it.
	out, err := s.t.client.ChangeMessageVisibilityBatch(context.Background(), &awssqs.ChangeMessageVisibilityBatchInput{QueueUrl: &s.q.URL, Entries: entries})
	failed := map[int]bool{}
	if err != nil {
		s.t.log.Warn("sqs: lease extension failed", "queue", s.q.Name, "messages", len(ds), "error", err)
	} else {
		for _, f := range out.Failed {
			i, _ := strconv.Atoi(aws.ToString(f.Id))
			failed[i] = true
		}
	}
	for i, dl := range ds {
		if err == nil && !failed[i] {
			dl.leaseEnd = start.Add(d)
		}
		if !dl.state.CompareAndSwap(stateExtending, stateUnsettled) &&
			dl.state.CompareAndSwap(stateNackPending, stateSettled) {
			s.sendNack(dl)
		}
	}
}
