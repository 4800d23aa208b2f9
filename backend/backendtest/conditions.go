package backendtest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testutil"
)

func tagQuery(tags ...string) event.Query {
	return event.Query{Items: []event.QueryItem{{Tags: tags}}}
}

func typeQuery(types ...string) event.Query {
	return event.Query{Items: []event.QueryItem{{Types: types}}}
}

// wantConflictAt fails unless err is a *event.ConflictError at position.
func wantConflictAt(t testing.TB, what string, err error, boundary string, after, position uint64) {
	t.Helper()
	var ce *event.ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("%s: err = %v, want a *event.ConflictError", what, err)
	}
	if ce.Boundary != boundary || ce.After != after || ce.Position != position {
		t.Fatalf("%s: conflict %+v, want boundary %q after %d position %d", what, *ce, boundary, after, position)
	}
	if !errors.Is(err, event.ErrConflict) {
		t.Fatalf("%s: errors.Is(err, ErrConflict) is false for %v", what, err)
	}
}

func testConditions(t *testing.T, open func(t *testing.T) backend.Store) {
	t.Run("ConditionHolds", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "orders")
		mustAppend(t, s, "orders", prep(t, "orders", ev("order.placed", "order:1"), ev("order.placed", "order:2")), nil)
		for name, cond := range map[string]*event.Condition{
			"no match at all":      {Query: tagQuery("order:3"), After: 0},
			"match only before":    {Query: tagQuery("order:1"), After: 1},
			"type matches, no tag": {Query: event.Query{Items: []event.QueryItem{{Types: []string{"order.placed"}, Tags: []string{"order:9"}}}}},
		} {
			if _, err := s.Append(t.Context(), "orders", batch(t, "orders", 1, "order.checked"), cond); err != nil {
				t.Fatalf("condition %s: %v, want the append to pass", name, err)
			}
		}
		if h := head(t, s, "orders"); h != 5 {
			t.Fatalf("head = %d, want 5", h)
		}
	})

	t.Run("ConditionFailsWithMatchingPosition", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "orders")
		mustAppend(t, s, "orders", prep(t, "orders",
			ev("order.placed", "order:1"),             // 1
			ev("order.shipped", "order:2"),            // 2
			ev("order.placed", "order:1"),             // 3
			ev("order.paid", "order:1", "customer:7"), // 4
		), nil)
		for _, c := range []struct {
			name      string
			cond      event.Condition
			wantMatch uint64
		}{
			{"tag, first match after", event.Condition{Query: tagQuery("order:1"), After: 1}, 3},
			{"tag from the start", event.Condition{Query: tagQuery("order:1"), After: 0}, 1},
			{"type", event.Condition{Query: typeQuery("order.shipped")}, 2},
			{"two tags", event.Condition{Query: tagQuery("customer:7", "order:1")}, 4},
			{"second item", event.Condition{Query: event.Query{Items: []event.QueryItem{{Tags: []string{"nope"}}, {Types: []string{"order.paid"}}}}, After: 3}, 4},
			{"empty query: any event", event.Condition{After: 2}, 3},
		} {
			in := batch(t, "orders", 2, "order.placed", "order:1")
			_, err := s.Append(t.Context(), "orders", in, &c.cond)
			wantConflictAt(t, c.name, err, "orders", c.cond.After, c.wantMatch)
		}
		if h := head(t, s, "orders"); h != 4 {
			t.Fatalf("head = %d, want 4: a failed condition writes nothing", h)
		}
		// After the head, even the empty query holds.
		if _, err := s.Append(t.Context(), "orders", batch(t, "orders", 1, "x"), &event.Condition{After: 4}); err != nil {
			t.Fatalf("condition after the head: %v", err)
		}
	})

	t.Run("ConditionFailedBySameGroup", func(t *testing.T) {
		t.Parallel()
		// The classic race: racers read the head, then append under "no
		// event with my tag after that head". Exactly one wins each round;
		// every loser fails with the winner's position, even when the winner
		// committed in the same group, and no loser's event is ever stored.
		// Bystanders with their own tag are not held up.
		s := setup(t, open, "claims")
		const rounds, racers, bystanders = 15, 6, 3
		for round := range rounds {
			h := head(t, s, "claims")
			tag := fmt.Sprintf("claim-%d", round)
			type outcome struct {
				in   []event.Input
				cond *event.Condition
				res  event.AppendResult
				err  error
			}
			all := make([]outcome, racers+bystanders)
			racing, others := all[:racers], all[racers:]
			for i := range racing {
				racing[i].in = batch(t, "claims", 1+i%2, "seat.claimed", tag)
				racing[i].cond = &event.Condition{Query: tagQuery(tag), After: h}
			}
			for i := range others {
				own := fmt.Sprintf("other-%d-%d", round, i)
				others[i].in = batch(t, "claims", 1, "seat.claimed", own)
				others[i].cond = &event.Condition{Query: tagQuery(own), After: h}
			}
			testutil.AtOnce(len(all), func(i int) {
				o := &all[i]
				o.res, o.err = s.Append(context.Background(), "claims", o.in, o.cond)
			})

			winner := -1
			for i, o := range racing {
				if o.err == nil {
					if winner >= 0 {
						t.Fatalf("round %d: racers %d and %d both passed the condition", round, winner, i)
					}
					winner = i
				}
			}
			if winner < 0 {
				t.Fatalf("round %d: no racer passed; the first to commit must (errors: %v)", round, racing[0].err)
			}
			for i, o := range racing {
				if i != winner {
					wantConflictAt(t, fmt.Sprintf("round %d racer %d", round, i), o.err, "claims", h, racing[winner].res.First)
				}
			}
			for i, o := range others {
				if o.err != nil {
					t.Fatalf("round %d bystander %d: %v; its condition does not match anything", round, i, o.err)
				}
			}
			_, tagged := readAll(t, s, "claims", &event.Query{Items: []event.QueryItem{{Tags: []string{tag}}}})
			if got, want := len(tagged), len(racing[winner].in); got != want {
				t.Fatalf("round %d: %d events carry %s, want the winner's %d", round, got, tag, want)
			}
			for i, e := range tagged {
				if e.ID != racing[winner].in[i].ID {
					t.Fatalf("round %d: event %s carries %s, want only the winner's events", round, e.ID, tag)
				}
			}
		}
		_, events := readAll(t, s, "claims", nil)
		CheckDense(t, events)
		// Every round stored one winner (1 or 2 events) and the bystanders.
		if len(events) < rounds*(1+bystanders) || len(events) > rounds*(2+bystanders) {
			t.Fatalf("%d events stored: losers' events must never be", len(events))
		}
	})
}
