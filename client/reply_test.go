package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/client"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
	"github.com/orisun-io/orisun/natsembed"
)

const (
	epochA = "0190b0a0-0000-7000-8000-0000000000aa"
	epochB = "0190b0a0-0000-7000-8000-0000000000bb"
	zero   = "00000000-0000-0000-0000-000000000000"
)

// impostor answers orisun's API subjects on a NATS server where no orisun
// runs, with whatever reply the test sets for a subject: what any process
// allowed to subscribe on orisun.api.> could send.
type impostor struct {
	mu      sync.Mutex
	replies map[string]string
}

func (im *impostor) set(subject, body string) {
	im.mu.Lock()
	defer im.mu.Unlock()
	im.replies[subject] = body
}

// startImpostor starts an embedded NATS server (no node), answers on
// orisun.api.> from an in-process connection, and connects a client to
// the server over TCP.
func startImpostor(t *testing.T) (*impostor, func() *client.Client) {
	t.Helper()
	srv := natstest.Server(t, natsembed.Config{})
	nc := natstest.Orisun(t, srv, "impostor")
	im := &impostor{replies: map[string]string{}}
	if _, err := nc.Subscribe(api.SubjectPrefix+".>", func(m *nats.Msg) {
		im.mu.Lock()
		body, ok := im.replies[m.Subject]
		im.mu.Unlock()
		if ok {
			_ = m.Respond([]byte(body))
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return im, func() *client.Client {
		return natstest.Client(t, srv.ClientURL(), client.Timeout(5*time.Second))
	}
}

func events(n int) []event.Input {
	out := make([]event.Input, n)
	for i := range out {
		out[i] = event.Input{Type: "seat.booked", Data: json.RawMessage(`{}`), Tags: []string{"seat:1"}}
	}
	return out
}

// stored is an event as orisun would return it.
func stored(boundary, epoch string, pos uint64, typ string, tags ...string) event.Event {
	if tags == nil {
		tags = []string{}
	}
	return event.Event{ID: event.NewID(), Boundary: boundary, Epoch: epoch, Position: pos, Type: typ,
		Time: time.Now().UTC(), Tags: tags, Data: json.RawMessage(`{}`), Metadata: json.RawMessage(`null`)}
}

func readReply(epoch string, head uint64, evs ...event.Event) string {
	if evs == nil {
		evs = []event.Event{}
	}
	b, _ := json.Marshal(api.ReadReply{Epoch: epoch, Head: head, Events: evs})
	return string(b)
}

// TestImpostorRepliesRefused: a reply that cannot be orisun's answer to the
// request (the all-zero epoch the impostor of the hostile-client run sent,
// an epoch that is no UUID, positions that do not fit the request, events
// of another boundary or epoch, out of order, beyond the head, not matching
// the query) is an error that errors.Is matches with client.ErrBadReply and
// whose message names what did not fit, never a success; and a reply that
// fits is taken.
func TestImpostorRepliesRefused(t *testing.T) {
	t.Parallel()
	im, connect := startImpostor(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const (
		appendSubj = "orisun.api.append.seats"
		readSubj   = "orisun.api.read.seats"
		latestSubj = "orisun.api.latest.seats"
	)
	seat1 := &event.Query{Items: []event.QueryItem{{Tags: []string{"seat:1"}}}}
	appendN := func(n int) func(c *client.Client) error {
		return func(c *client.Client) error { _, err := c.Append(ctx, "seats", events(n), nil); return err }
	}
	read := func(after uint64, limit int, q *event.Query) func(c *client.Client) error {
		return func(c *client.Client) error { _, err := c.Read(ctx, "seats", after, limit, q); return err }
	}
	readBack := func(before uint64, limit int, q *event.Query) func(c *client.Client) error {
		return func(c *client.Client) error { _, err := c.ReadBackward(ctx, "seats", before, limit, q); return err }
	}
	latest := func(q *event.Query) func(c *client.Client) error {
		return func(c *client.Client) error { _, err := c.ReadLatest(ctx, "seats", q); return err }
	}
	cases := []struct {
		name, subject, reply string
		call                 func(c *client.Client) error
		mention              string // "" when the reply fits
	}{
		{"append all-zero epoch", appendSubj, `{"epoch":"` + zero + `","first":1,"last":1}`, appendN(1), "all-zero UUID"},
		{"append epoch not a UUID", appendSubj, `{"epoch":"epoch-1","first":1,"last":1}`, appendN(1), `epoch "epoch-1" is not a UUID`},
		{"append no epoch", appendSubj, `{"first":1,"last":1}`, appendN(1), `epoch "" is not a UUID`},
		{"append one position for two events", appendSubj, `{"epoch":"` + epochA + `","first":7,"last":7}`, appendN(2),
			"an append of 2 events answered with positions 7 to 7"},
		{"append three positions for two events", appendSubj, `{"epoch":"` + epochA + `","first":7,"last":9}`, appendN(2), "positions 7 to 9"},
		{"append from position 0", appendSubj, `{"epoch":"` + epochA + `","first":0,"last":1}`, appendN(2), "positions 0 to 1"},
		{"append last before first", appendSubj, `{"epoch":"` + epochA + `","first":5,"last":4}`, appendN(2), "positions 5 to 4"},
		{"append that fits", appendSubj, `{"epoch":"` + epochA + `","first":7,"last":8}`, appendN(2), ""},

		{"read all-zero epoch", readSubj, readReply(zero, 0), read(0, 10, nil), "all-zero UUID"},
		{"read that fits", readSubj, readReply(epochA, 3, stored("seats", epochA, 2, "a"), stored("seats", epochA, 3, "a")), read(1, 10, nil), ""},
		{"read event of another boundary", readSubj, readReply(epochA, 3, stored("other", epochA, 2, "a")), read(1, 10, nil),
			`events[0] (position 2) is of boundary "other", not "seats"`},
		{"read event of another epoch", readSubj, readReply(epochA, 3, stored("seats", epochB, 2, "a")), read(1, 10, nil),
			"events[0] (position 2) is of epoch " + epochB},
		{"read event not after the position", readSubj, readReply(epochA, 3, stored("seats", epochA, 1, "a")), read(1, 10, nil),
			"events[0] has position 1, not after 1"},
		{"read events out of order", readSubj, readReply(epochA, 9, stored("seats", epochA, 5, "a", "seat:1"), stored("seats", epochA, 3, "a", "seat:1")),
			read(1, 10, seat1), "events[1] has position 3, not after 5"},
		{"read position missing", readSubj, readReply(epochA, 4, stored("seats", epochA, 2, "a"), stored("seats", epochA, 4, "a")), read(1, 10, nil),
			"events[1] has position 4, not 3"},
		{"read beyond the head", readSubj, readReply(epochA, 2, stored("seats", epochA, 2, "a"), stored("seats", epochA, 3, "a")), read(1, 10, nil),
			"events[1] has position 3, beyond the head 2"},
		{"read more than the limit", readSubj, readReply(epochA, 3, stored("seats", epochA, 2, "a"), stored("seats", epochA, 3, "a")), read(1, 1, nil),
			"2 events, the request's limit is 1"},
		{"read nothing below the head", readSubj, readReply(epochA, 3), read(1, 10, nil), "no events after position 1, though the head is 3"},
		{"read head before the position", readSubj, readReply(epochA, 0), read(1, 10, nil), "head 0 is before the requested position 1"},
		{"read not matching the query", readSubj, readReply(epochA, 3, stored("seats", epochA, 3, "a", "seat:2")), read(1, 10, seat1),
			`events[0] (position 3, type "a") does not match the query`},
		{"read with a query that fits", readSubj, readReply(epochA, 9, stored("seats", epochA, 3, "a", "seat:1"), stored("seats", epochA, 7, "a", "seat:1")),
			read(1, 10, seat1), ""},

		{"backward read that fits", readSubj, readReply(epochA, 3, stored("seats", epochA, 3, "a"), stored("seats", epochA, 2, "a")), readBack(0, 2, nil), ""},
		{"backward read below a position that fits", readSubj, readReply(epochA, 9, stored("seats", epochA, 3, "a"), stored("seats", epochA, 2, "a")),
			readBack(4, 2, nil), ""},
		{"backward read past the head that fits", readSubj, readReply(epochA, 3, stored("seats", epochA, 3, "a")), readBack(100, 1, nil), ""},
		{"backward read with a query that fits", readSubj, readReply(epochA, 9, stored("seats", epochA, 7, "a", "seat:1"), stored("seats", epochA, 3, "a", "seat:1")),
			readBack(0, 10, seat1), ""},
		{"backward read of nothing below 1", readSubj, readReply(epochA, 9), readBack(1, 10, nil), ""},
		{"backward read ascending", readSubj, readReply(epochA, 9, stored("seats", epochA, 3, "a", "seat:1"), stored("seats", epochA, 7, "a", "seat:1")),
			readBack(0, 10, seat1), "events[1] has position 7, not below 3"},
		{"backward read not below the position", readSubj, readReply(epochA, 9, stored("seats", epochA, 4, "a"), stored("seats", epochA, 3, "a")),
			readBack(4, 10, nil), "events[0] has position 4, not below the requested 4"},
		{"backward read not from the head", readSubj, readReply(epochA, 3, stored("seats", epochA, 2, "a"), stored("seats", epochA, 1, "a")),
			readBack(0, 10, nil), "events[0] has position 2, not 3"},
		{"backward read position missing", readSubj, readReply(epochA, 3, stored("seats", epochA, 3, "a"), stored("seats", epochA, 1, "a")),
			readBack(0, 10, nil), "events[1] has position 1, not 2"},
		{"backward read beyond the head", readSubj, readReply(epochA, 2, stored("seats", epochA, 3, "a")), readBack(0, 10, nil),
			"events[0] has position 3, beyond the head 2"},
		{"backward read more than the limit", readSubj, readReply(epochA, 3, stored("seats", epochA, 3, "a"), stored("seats", epochA, 2, "a")),
			readBack(0, 1, nil), "2 events, the request's limit is 1"},
		{"backward read nothing below the head", readSubj, readReply(epochA, 3), readBack(0, 10, nil), "no events below position 4, though the head is 3"},
		{"backward read not matching the query", readSubj, readReply(epochA, 3, stored("seats", epochA, 3, "a", "seat:2")), readBack(0, 10, seat1),
			`events[0] (position 3, type "a") does not match the query`},
		{"backward read of another boundary", readSubj, readReply(epochA, 3, stored("other", epochA, 3, "a")), readBack(0, 10, nil),
			`events[0] (position 3) is of boundary "other", not "seats"`},
		{"backward read all-zero epoch", readSubj, readReply(zero, 0), readBack(0, 10, nil), "all-zero UUID"},

		{"latest all-zero epoch", latestSubj, `{"epoch":"` + zero + `","head":0,"event":null}`, latest(nil), "all-zero UUID"},
		{"latest beyond the head", latestSubj, func() string {
			b, _ := json.Marshal(event.Latest{Epoch: epochA, Head: 2, Event: ptr(stored("seats", epochA, 3, "a"))})
			return string(b)
		}(), latest(nil), "the event has position 3, outside 1 to the head 2"},
		{"latest of another boundary", latestSubj, func() string {
			b, _ := json.Marshal(event.Latest{Epoch: epochA, Head: 3, Event: ptr(stored("other", epochA, 3, "a"))})
			return string(b)
		}(), latest(nil), `is of boundary "other"`},
		{"latest not matching the query", latestSubj, func() string {
			b, _ := json.Marshal(event.Latest{Epoch: epochA, Head: 3, Event: ptr(stored("seats", epochA, 3, "a", "seat:2"))})
			return string(b)
		}(), latest(seat1), "does not match the query"},

		{"create another boundary", api.SubjectCreateBoundary, `{"name":"other","epoch":"` + epochA + `","head":0}`,
			func(c *client.Client) error { _, err := c.CreateBoundary(ctx, "seats"); return err }, `boundary "other" answered for "seats"`},
		{"create all-zero epoch", api.SubjectCreateBoundary, `{"name":"seats","epoch":"` + zero + `","head":0}`,
			func(c *client.Client) error { _, err := c.CreateBoundary(ctx, "seats"); return err }, "all-zero UUID"},
		{"boundaries all-zero epoch", api.SubjectBoundaries,
			`{"boundaries":[{"name":"seats","epoch":"` + epochA + `","head":0},{"name":"other","epoch":"` + zero + `","head":0}]}`,
			func(c *client.Client) error { _, err := c.Boundaries(ctx); return err }, `boundary "other": epoch ` + zero},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// One subject's reply at a time, and a client of its own: no
			// epoch remembered from another case.
			im.set(tc.subject, tc.reply)
			err := tc.call(connect())
			if tc.mention == "" {
				if err != nil {
					t.Fatalf("a reply that fits the request: %v", err)
				}
				return
			}
			if !errors.Is(err, client.ErrBadReply) || !strings.Contains(err.Error(), tc.mention) ||
				!strings.Contains(err.Error(), tc.subject) {
				t.Fatalf("got %v, want client.ErrBadReply naming %s and %q", err, tc.subject, tc.mention)
			}
			if errors.Is(err, event.ErrEpochChanged) {
				t.Fatalf("%v: not an epoch change", err)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestChangedEpochRefused: the client remembers the epoch of each boundary
// from its replies; a reply with another epoch is refused once, naming both
// (client.ErrBadReply and event.ErrEpochChanged), and the new epoch is the
// one compared with from then on. Replies that switch between two epochs
// (two stores answering on one NATS, or an impostor) keep failing; other
// boundaries are not affected.
func TestChangedEpochRefused(t *testing.T) {
	t.Parallel()
	im, connect := startImpostor(t)
	c := connect()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const subj = "orisun.api.append.seats"
	reply := func(epoch string) { im.set(subj, `{"epoch":"`+epoch+`","first":1,"last":1}`) }
	appendOne := func() error { _, err := c.Append(ctx, "seats", events(1), nil); return err }

	reply(epochA)
	if err := appendOne(); err != nil {
		t.Fatalf("first reply: %v", err)
	}
	if err := appendOne(); err != nil {
		t.Fatalf("same epoch again: %v", err)
	}
	reply(epochB)
	err := appendOne()
	if !errors.Is(err, client.ErrBadReply) || !errors.Is(err, event.ErrEpochChanged) ||
		!strings.Contains(err.Error(), epochA) || !strings.Contains(err.Error(), epochB) {
		t.Fatalf("changed epoch: got %v, want ErrBadReply and ErrEpochChanged naming %s and %s", err, epochA, epochB)
	}
	if err := appendOne(); err != nil {
		t.Fatalf("the new epoch, once reported: %v", err)
	}
	reply(epochA)
	if err := appendOne(); !errors.Is(err, event.ErrEpochChanged) {
		t.Fatalf("back to the first epoch: got %v, want ErrEpochChanged", err)
	}
	// A read of the same boundary is compared with the same memory; a
	// read of another boundary has its own.
	im.set("orisun.api.read.seats", readReply(epochB, 0))
	if _, err := c.Read(ctx, "seats", 0, 10, nil); !errors.Is(err, event.ErrEpochChanged) {
		t.Fatalf("read in epoch B after an append in epoch A: got %v", err)
	}
	im.set("orisun.api.read.other", readReply(epochA, 0))
	if _, err := c.Read(ctx, "other", 0, 10, nil); err != nil {
		t.Fatalf("read of another boundary: %v", err)
	}
}

// TestRealRepliesAccepted: against a real node every reply passes the
// checks, idempotent retries included (the stored positions, n of them);
// and a boundary created again in another store (the node's database
// replaced, the client connected throughout) is reported once as a changed
// epoch naming both, after which the same events sent again with the same
// ids get their positions in the new epoch.
func TestRealRepliesAccepted(t *testing.T) {
	t.Parallel()
	port := testutil.FreePort(t)
	start := func() *orisun.Node {
		n, err := orisun.New(orisun.Config{DataDir: t.TempDir(), NATSPort: port, PollInterval: 20 * time.Millisecond,
			Boundaries: []string{"seats"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		return n
	}
	n := start()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = n.Stop()
		}
	})
	c := natstest.Client(t, n.NATSURL(), client.Timeout(5*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	batch := events(3)
	for i := range batch {
		batch[i].ID = event.NewID()
	}
	res, err := c.Append(ctx, "seats", batch, nil)
	if err != nil || res.First != 1 || res.Last != 3 {
		t.Fatalf("append: %+v, %v", res, err)
	}
	if again, err := c.Append(ctx, "seats", batch, nil); err != nil || again != res {
		t.Fatalf("idempotent retry: %+v, %v; want %+v", again, err, res)
	}
	// The last of them alone: its stored position, one of them.
	if one, err := c.Append(ctx, "seats", batch[2:], nil); err != nil || one.First != 3 || one.Last != 3 {
		t.Fatalf("retry of the last event: %+v, %v", one, err)
	}
	seat1 := &event.Query{Items: []event.QueryItem{{Tags: []string{"seat:1"}}}}
	if _, err := c.Append(ctx, "seats", events(2), &event.Condition{Query: event.Query{Items: []event.QueryItem{{Types: []string{"none"}}}}, After: 3}); err != nil {
		t.Fatalf("conditional append: %v", err)
	}
	for _, tc := range []struct {
		after uint64
		limit int
		q     *event.Query
		n     int
	}{{0, 10, nil, 5}, {2, 2, nil, 2}, {5, 10, nil, 0}, {1, 10, seat1, 4}} {
		rd, err := c.Read(ctx, "seats", tc.after, tc.limit, tc.q)
		if err != nil || len(rd.Events) != tc.n || rd.Epoch != res.Epoch {
			t.Fatalf("read after %d limit %d: %d events, %v", tc.after, tc.limit, len(rd.Events), err)
		}
	}
	for _, tc := range []struct {
		before uint64
		limit  int
		q      *event.Query
		first  uint64
		n      int
	}{{0, 10, nil, 5, 5}, {4, 2, nil, 3, 2}, {1, 10, nil, 0, 0}, {100, 1, nil, 5, 1}, {5, 10, seat1, 4, 4}} {
		rd, err := c.ReadBackward(ctx, "seats", tc.before, tc.limit, tc.q)
		if err != nil || len(rd.Events) != tc.n || rd.Epoch != res.Epoch || (tc.n > 0 && rd.Events[0].Position != tc.first) {
			t.Fatalf("read backward before %d limit %d: %d events, %v", tc.before, tc.limit, len(rd.Events), err)
		}
	}
	if l, err := c.ReadLatest(ctx, "seats", seat1); err != nil || l.Event == nil || l.Event.Position != 5 {
		t.Fatalf("latest: %+v, %v", l, err)
	}
	if b, err := c.CreateBoundary(ctx, "seats"); err != nil || b.Epoch != res.Epoch {
		t.Fatalf("create an existing boundary: %+v, %v", b, err)
	}
	if _, err := c.CreateBoundary(ctx, "more"); err != nil {
		t.Fatal(err)
	}
	if bs, err := c.Boundaries(ctx); err != nil || len(bs) != 2 {
		t.Fatalf("boundaries: %+v, %v", bs, err)
	}

	// A second client that has seen the old epoch, for the subscription
	// below.
	c2 := natstest.Client(t, n.NATSURL(), client.Timeout(5*time.Second))
	if _, err := c2.Read(ctx, "seats", 0, 1, nil); err != nil {
		t.Fatal(err)
	}

	// The database replaced: a new node, a new store, the same port.
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	n = start()
	var changed error
	testutil.Eventually(t, "an answer from the new node", 30*time.Second, 50*time.Millisecond, func() bool {
		_, changed = c.Append(ctx, "seats", batch, nil)
		return !errors.Is(changed, event.ErrUnavailable) && !errors.Is(changed, event.ErrClosed)
	})
	if !errors.Is(changed, event.ErrEpochChanged) || !errors.Is(changed, client.ErrBadReply) ||
		!strings.Contains(changed.Error(), res.Epoch) || !strings.Contains(changed.Error(), "same ids") {
		t.Fatalf("append to the new store: got %v, want a changed epoch naming %s", changed, res.Epoch)
	}
	again, err := c.Append(ctx, "seats", batch, nil)
	if err != nil || again.First != 1 || again.Last != 3 || again.Epoch == res.Epoch {
		t.Fatalf("the same events again in the new epoch: %+v, %v", again, err)
	}
	if b, err := n.Boundary(ctx, "seats"); err != nil || b.Head != 3 || b.Epoch != again.Epoch {
		t.Fatalf("the new store: %+v, %v; want head 3 in epoch %s", b, err, again.Epoch)
	}
	// A subscription that names no epoch follows the boundary's current
	// one, though its client remembers the old epoch from a reply before
	// it: the client's memory is not the subscription's epoch.
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	var got []event.Event
	err = c2.Subscribe(sctx, "seats", 0, func(_ context.Context, e event.Event) error {
		got = append(got, e)
		if len(got) == 3 {
			scancel()
		}
		return nil
	}, client.SubscribeOptions{})
	if len(got) != 3 || got[0].Position != 1 || got[2].Position != 3 || got[0].Epoch != again.Epoch {
		t.Fatalf("subscription without an epoch after the reset: %d events, err %v; want positions 1-3 of epoch %s", len(got), err, again.Epoch)
	}
	stopped = true
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
}
