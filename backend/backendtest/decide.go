package backendtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testutil"
)

// testSameGroup: requests of one group commit transaction see each other's
// events in their order (a condition fails on an event appended earlier in
// the same group), one request's failure fails that request only, and a
// failed request's events are seen by nobody (docs/design.md §4). The requests are
// put into one group with the backend's hold hook, not by timing.
func testSameGroup(t *testing.T, open func(t *testing.T) backend.Store, f Features) {
	type call struct {
		in   []event.Input
		cond *event.Condition
		res  event.AppendResult
		err  error
	}
	// inOneGroup sends the calls in order, each after the previous one is
	// queued, while the boundary's groups are held, then releases them:
	// they commit in one group transaction, in this order.
	inOneGroup := func(t *testing.T, s backend.Store, boundary string, calls []*call) {
		t.Helper()
		groups := f.Groups(s)
		queued, release := f.HoldGroups(s, boundary)
		defer release()
		var wg sync.WaitGroup
		for i, c := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.res, c.err = s.Append(context.Background(), boundary, c.in, c.cond)
			}()
			testutil.Eventually(t, fmt.Sprintf("request %d queued behind the held group", i), 10*time.Second, 10*time.Millisecond,
				func() bool { return queued() == i+1 })
		}
		release()
		wg.Wait()
		if n := f.Groups(s) - groups; n != 1 {
			t.Fatalf("the %d requests ran in %d group transactions, want 1: the hold hook must gather them", len(calls), n)
		}
	}

	t.Run("TagsOfEachEventKept", func(t *testing.T) {
		t.Parallel()
		// Requests of one group may be appended by one statement (the
		// PostgreSQL backend merges those without conditions): each event
		// keeps its own tags, in their order, also when others have none.
		s := setup(t, open, "tags")
		odd := []string{`a b`, `ü,"x"`, `{1,2}`, `NULL`, `\`, `'`, `[]`}
		// Two groups of three events (the suite's smallest group size):
		// no tags first, then in the middle.
		var want [][]string
		for _, calls := range [][]*call{
			{{in: prep(t, "tags", ev("t.none"))}, {in: prep(t, "tags", ev("t.odd", odd...))}, {in: prep(t, "tags", ev("t.dup", "d", "d", "x"))}},
			{{in: prep(t, "tags", ev("t.one", "x"))}, {in: prep(t, "tags", ev("t.none"))}, {in: prep(t, "tags", ev("t.two", "z", "y"))}},
		} {
			inOneGroup(t, s, "tags", calls)
			for i, c := range calls {
				if c.err != nil {
					t.Fatalf("request %d: %v", i, c.err)
				}
				want = append(want, c.in[0].Tags)
			}
		}
		events := WantStored(t, s, "tags", len(want), "")
		for i, e := range events {
			if e.Tags == nil || fmt.Sprintf("%q", e.Tags) != fmt.Sprintf("%q", want[i]) {
				t.Errorf("event at position %d (%s) has tags %#v, want %#v", e.Position, e.Type, e.Tags, want[i])
			}
		}
		// The tag index finds them, each odd tag as a whole value.
		for _, tag := range odd {
			if _, got := readAll(t, s, "tags", &event.Query{Items: []event.QueryItem{{Tags: []string{tag}}}}); len(got) != 1 || got[0].Type != "t.odd" {
				t.Errorf("query by tag %q found %d events, want the one t.odd", tag, len(got))
			}
		}
	})

	t.Run("ConditionFailedByEarlierRequest", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "seats")
		mustAppend(t, s, "seats", batch(t, "seats", 1, "show.scheduled", "show:1"), nil) // 1
		h := head(t, s, "seats")
		claim := &call{in: batch(t, "seats", 1, "seat.claimed", "seat:7")}
		rival := &call{in: batch(t, "seats", 1, "seat.claimed", "seat:7"),
			cond: &event.Condition{Query: tagQuery("seat:7"), After: h}}
		other := &call{in: batch(t, "seats", 1, "seat.claimed", "seat:8"),
			cond: &event.Condition{Query: tagQuery("seat:8"), After: h}}
		inOneGroup(t, s, "seats", []*call{claim, rival, other})

		if claim.err != nil || claim.res.First != 2 {
			t.Fatalf("first request: %+v, %v; want position 2", claim.res, claim.err)
		}
		// The rival's condition was checked after the claim, in the same
		// transaction: it sees the claim's event, uncommitted as it was.
		wantConflictAt(t, "condition violated by an earlier request of the same group", rival.err, "seats", h, 2)
		if other.err != nil || other.res.First != 3 {
			t.Fatalf("third request (its condition holds): %+v, %v; want position 3: a failed request fails only itself",
				other.res, other.err)
		}
		WantStored(t, s, "seats", 3, ": the rival's event must not be")
	})

	t.Run("FailedRequestIsInvisible", func(t *testing.T) {
		t.Parallel()
		// A request that fails inside the group (its id is stored with
		// other content) is rolled back alone: a later request's condition
		// on its tag holds, and the request after that lands right after
		// it (I1: no hole where the failed request was).
		s := setup(t, open, "seats")
		stored := mustAppend(t, s, "seats", batch(t, "seats", 1, "seat.claimed", "seat:1"), nil)
		_, before := readAll(t, s, "seats", nil)
		bad := prep(t, "seats", event.Input{ID: before[0].ID, Type: "seat.claimed", Data: json.RawMessage(`{"other":true}`),
			Tags: []string{"seat:2"}})
		failing := &call{in: bad}
		checker := &call{in: batch(t, "seats", 1, "seat.claimed", "seat:2"),
			cond: &event.Condition{Query: tagQuery("seat:2"), After: stored.Last}}
		inOneGroup(t, s, "seats", []*call{failing, checker})
		wantErr(t, "same id, other content", failing.err, event.ErrConflict)
		var ce *event.ConflictError
		if errors.As(failing.err, &ce) {
			t.Fatalf("an id conflict is not a condition failure: %v", failing.err)
		}
		if checker.err != nil || checker.res.First != 2 {
			t.Fatalf("request after the failed one: %+v, %v; want position 2: the failed request's event must be invisible",
				checker.res, checker.err)
		}
		_, events := readAll(t, s, "seats", nil)
		CheckDense(t, events)
	})

	t.Run("FailedRequestInMergedRun", func(t *testing.T) {
		t.Parallel()
		// Three unconditioned requests in a row (a backend may insert such
		// a run with one statement): the middle one fails (its id is stored
		// with other content). The first and the third land, the third
		// right after the first: positions stay dense (I1), nothing of the
		// failed one is stored.
		s := setup(t, open, "seats")
		stored := mustAppend(t, s, "seats", batch(t, "seats", 1, "seat.claimed", "seat:1"), nil) // 1
		_, before := readAll(t, s, "seats", nil)
		// One event each: the three must fit one group of the smallest
		// group size the suite runs with (3 events).
		first := &call{in: batch(t, "seats", 1, "seat.claimed", "seat:2")}
		bad := &call{in: prep(t, "seats",
			event.Input{ID: before[0].ID, Type: "seat.claimed", Data: json.RawMessage(`{"other":true}`), Tags: []string{"seat:9"}})}
		third := &call{in: batch(t, "seats", 1, "seat.claimed", "seat:3")}
		inOneGroup(t, s, "seats", []*call{first, bad, third})
		wantErr(t, "same id, other content, in a merged run", bad.err, event.ErrConflict)
		if first.err != nil || first.res.First != stored.Last+1 || first.res.Last != stored.Last+1 {
			t.Fatalf("first request: %+v, %v; want position %d", first.res, first.err, stored.Last+1)
		}
		if third.err != nil || third.res.First != first.res.Last+1 || third.res.Last != first.res.Last+1 {
			t.Fatalf("third request: %+v, %v; want position %d, right after the first", third.res, third.err, first.res.Last+1)
		}
		_, events := readAll(t, s, "seats", nil)
		CheckDense(t, events)
		if len(events) != 3 || head(t, s, "seats") != 3 {
			t.Fatalf("%d events stored (head %d), want 3: nothing of the failed request", len(events), head(t, s, "seats"))
		}
		for _, e := range events {
			for _, tag := range e.Tags {
				if tag == "seat:9" {
					t.Fatalf("an event of the failed request is stored at position %d", e.Position)
				}
			}
		}
	})

	t.Run("ConditionSeesMergedRun", func(t *testing.T) {
		t.Parallel()
		// Two unconditioned requests (a run a backend may insert with one
		// statement), then a request conditioned on the first's tag after
		// the head all three read: the condition sees the run's insert,
		// uncommitted as it is, and fails at the first's position.
		s := setup(t, open, "seats")
		mustAppend(t, s, "seats", batch(t, "seats", 1, "show.scheduled", "show:1"), nil) // 1
		h := head(t, s, "seats")
		first := &call{in: batch(t, "seats", 1, "seat.claimed", "seat:7")}
		second := &call{in: batch(t, "seats", 1, "seat.claimed", "seat:8")}
		checked := &call{in: batch(t, "seats", 1, "seat.claimed", "seat:7"),
			cond: &event.Condition{Query: tagQuery("seat:7"), After: h}}
		inOneGroup(t, s, "seats", []*call{first, second, checked})
		if first.err != nil || first.res.First != h+1 || second.err != nil || second.res.First != h+2 {
			t.Fatalf("unconditioned requests: %+v (%v), %+v (%v); want positions %d and %d",
				first.res, first.err, second.res, second.err, h+1, h+2)
		}
		wantConflictAt(t, "condition on the first request of a merged run", checked.err, "seats", h, h+1)
		WantStored(t, s, "seats", 3, ": the conditioned request's event must not be")
	})

	t.Run("RetryInSameGroup", func(t *testing.T) {
		t.Parallel()
		// The same events twice in one group (a client that retried before
		// its first attempt was answered): the second is the idempotent
		// retry of the first and gets its positions.
		s := setup(t, open, "seats")
		in := batch(t, "seats", 1, "seat.claimed", "seat:1")
		first, again := &call{in: in}, &call{in: in}
		inOneGroup(t, s, "seats", []*call{first, again})
		if first.err != nil || again.err != nil || first.res != again.res || first.res.First != 1 {
			t.Fatalf("first %+v (%v), retry %+v (%v); want both at position 1", first.res, first.err, again.res, again.err)
		}
		if h := head(t, s, "seats"); h != 1 {
			t.Fatalf("head = %d, want 1: a retry writes nothing", h)
		}
	})
}

// testLatest: read-latest returns the matching event with the highest
// position and the head, from one snapshot.
func testLatest(t *testing.T, open func(t *testing.T) backend.Store) {
	s := setupShop(t, open)
	Create(t, s, "empty")
	ctx := t.Context()

	l, err := s.Latest(ctx, "empty", nil)
	b, _ := s.Boundary(ctx, "empty")
	if err != nil || l.Head != 0 || l.Event != nil || l.Epoch != b.Epoch {
		t.Fatalf("Latest of an empty boundary = %+v, %v; want head 0, no event, epoch %s", l, err, b.Epoch)
	}
	_, err = s.Latest(ctx, "nope", nil)
	wantErr(t, "Latest of a missing boundary", err, event.ErrNotFound)

	_, all := readAll(t, s, "shop", nil)
	for _, c := range []struct {
		name string
		q    *event.Query
		want uint64 // 0: none
	}{
		{"nil query: the head event", nil, 18},
		{"no items: the head event", &event.Query{}, 18},
		{"type", QueryItem([]string{"order.shipped"}), 3},
		{"types", QueryItem([]string{"order.shipped", "customer.registered"}), 4},
		{"tag", QueryItem(nil, "customer:1"), 18},
		{"type and tag", QueryItem([]string{"customer.registered"}, "customer:1"), 4},
		{"two tags", QueryItem(nil, "x", "y"), 12},
		{"odd tag", QueryItem(nil, "100%"), 6},
		{"several items", &event.Query{Items: []event.QueryItem{{Tags: []string{"x,y"}}, {Types: []string{"plain"}}}}, 16},
		{"no match", QueryItem(nil, "nope"), 0},
	} {
		l, err := s.Latest(ctx, "shop", c.q)
		if err != nil {
			t.Fatalf("Latest %s: %v", c.name, err)
		}
		if l.Head != 18 || l.Epoch != all[0].Epoch {
			t.Fatalf("Latest %s: head %d epoch %s, want 18 and %s", c.name, l.Head, l.Epoch, all[0].Epoch)
		}
		switch {
		case c.want == 0 && l.Event != nil:
			t.Errorf("Latest %s = position %d, want none", c.name, l.Event.Position)
		case c.want != 0 && l.Event == nil:
			t.Errorf("Latest %s = none, want position %d", c.name, c.want)
		case c.want != 0:
			got, want := *l.Event, all[c.want-1]
			if got.Position != want.Position || got.ID != want.ID || got.Type != want.Type || !got.Time.Equal(want.Time) ||
				string(got.Data) != string(want.Data) || fmt.Sprint(got.Tags) != fmt.Sprint(want.Tags) ||
				got.Boundary != "shop" || got.Epoch != want.Epoch {
				t.Errorf("Latest %s = %+v, want the event Read returns: %+v", c.name, got, want)
			}
		}
	}
}

// testDecisions: the decision loop of docs/design.md §4 under contention. 32
// clients each try to reserve one of the last 10 seats of a show: read the
// latest reservation (its data holds the count so far), decide, append
// under "no reservation after what I read", and on a conflict read and
// decide again. Exactly 10 succeed, each seat is sold once, and the sold-out
// clients are refused by their own decision, never by a lost update.
func testDecisions(t *testing.T, open func(t *testing.T) backend.Store) {
	s := setup(t, open, "shows")
	const seats, clients = 10, 32
	mustAppend(t, s, "shows", prep(t, "shows", ev("show.scheduled", "show:42"), ev("noise", "show:41")), nil)
	q := &event.Query{Items: []event.QueryItem{{Types: []string{"seat.reserved"}, Tags: []string{"show:42"}}}}
	type count struct {
		Reserved int `json:"reserved"`
	}
	results := make([]int, clients) // the seat number reserved, 0: sold out
	errs := make([]error, clients)
	conflicts := make([]int, clients)
	// Every client's first read happens before any append: all 32 first
	// decisions are taken from the same head, so exactly one of them can
	// land and the other 31 must conflict, whatever the scheduling. A
	// backend that ignored conditions would sell every seat to the first
	// ten without a conflict and fail the count below.
	var firstReads sync.WaitGroup
	firstReads.Add(clients)
	testutil.AtOnce(clients, func(c int) {
		readDone := sync.OnceFunc(firstReads.Done)
		defer readDone() // a client that fails early never blocks the others
		for round := 0; ; round++ {
			l, err := s.Latest(context.Background(), "shows", q)
			if err != nil {
				errs[c] = err
				return
			}
			if round == 0 {
				readDone()
				firstReads.Wait()
			}
			var n count
			if l.Event != nil {
				if err := json.Unmarshal(l.Event.Data, &n); err != nil {
					errs[c] = err
					return
				}
			}
			if n.Reserved >= seats {
				return // sold out: the decision says no
			}
			data, _ := json.Marshal(count{Reserved: n.Reserved + 1})
			in, err := event.Prepare("shows", []event.Input{{Type: "seat.reserved", Data: data,
				Tags: []string{"show:42", fmt.Sprintf("client:%d", c)}}}, event.Limits{})
			if err != nil {
				errs[c] = err
				return
			}
			_, err = s.Append(context.Background(), "shows", in, &event.Condition{Query: *q, After: l.Head})
			var ce *event.ConflictError
			switch {
			case err == nil:
				results[c] = n.Reserved + 1
				return
			case errors.As(err, &ce):
				if ce.Position <= l.Head {
					errs[c] = fmt.Errorf("conflict at %d, not after the head %d that was read", ce.Position, l.Head)
					return
				}
				conflicts[c]++ // someone else reserved meanwhile: decide again
			default:
				errs[c] = err
				return
			}
		}
	})
	sold := map[int]int{}
	for c := range clients {
		if errs[c] != nil {
			t.Fatalf("client %d: %v", c, errs[c])
		}
		if results[c] > 0 {
			if other, dup := sold[results[c]]; dup {
				t.Fatalf("seat %d sold to clients %d and %d", results[c], other, c)
			}
			sold[results[c]] = c
		}
	}
	if len(sold) != seats {
		t.Fatalf("%d clients reserved a seat, want exactly %d", len(sold), seats)
	}
	_, reserved := readAll(t, s, "shows", q)
	if len(reserved) != seats {
		t.Fatalf("%d reservations stored, want %d", len(reserved), seats)
	}
	for i, e := range reserved {
		var n count
		if err := json.Unmarshal(e.Data, &n); err != nil || n.Reserved != i+1 {
			t.Fatalf("reservation %d at position %d says %s, want reserved %d", i, e.Position, e.Data, i+1)
		}
	}
	_, all := readAll(t, s, "shows", nil)
	CheckDense(t, all)
	total := 0
	for _, n := range conflicts {
		total += n
	}
	t.Logf("%d clients, %d seats, %d conflicts retried", clients, seats, total)
	if total < clients-1 {
		t.Fatalf("%d conflicts, want at least %d: all first decisions were taken from one head, so all but one must conflict",
			total, clients-1)
	}
}
