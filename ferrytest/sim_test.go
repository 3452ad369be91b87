package ferrytest_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/transport"
)

// orders returns n events over keys keys: evt-1 ... evt-n, the i-th on
// key order-(i mod keys), its payload its number.
func orders(n, keys int) []*handler.Message {
	out := make([]*handler.Message, n)
	for i := range out {
		out[i] = &handler.Message{ID: fmt.Sprintf("evt-%d", i+1), Key: fmt.Sprintf("order-%d", i%keys),
			Topic: "orders", Payload: []byte(strconv.Itoa(i + 1))}
	}
	return out
}

// inboxScenario is a correct handler: the Recommended stack deduplicating
// with an Inbox, its effect in the inbox transaction.
func inboxScenario(s *ferrytest.Sim) {
	s.Input(orders(12, 4)...)
	in := s.NewInbox()
	s.Consumer("stock", transport.Subscription{Topic: "orders"}, func(p *ferrytest.Process) (handler.Handler, error) {
		mw, err := middleware.Recommended(s, middleware.Deduplicate(in), middleware.WithLogger(p.Logger()))
		if err != nil {
			return nil, err
		}
		return mw(handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
			return s.Effect(ctx, "stock", m.ID)
		})), nil
	})
	s.Expect(ferrytest.OneEffect("stock"), ferrytest.KeyOrder("stock"), ferrytest.NothingLost("stock", "stock", nil))
}

func TestInboxHandlerKeepsTheInvariants(t *testing.T) {
	for _, p := range ferrytest.Profiles() {
		t.Run(p.Name, func(t *testing.T) {
			ferrytest.Check(t, p, inboxScenario, ferrytest.Seeds(50))
		})
	}
}
