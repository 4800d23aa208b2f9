package backendtest

import (
	"context"
	"testing"
	"time"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testutil"
)

// shortTTL is the lease time of the expiry tests: long enough that a busy
// machine still renews in time, short enough to wait for.
const shortTTL = 200 * time.Millisecond

// longTTL is for leases that must not expire during a test.
const longTTL = time.Minute

func acquire(t testing.TB, s backend.Store, boundary, holder string, ttl time.Duration) backend.Lease {
	t.Helper()
	l, err := s.AcquireLease(context.Background(), boundary, holder, nil, ttl)
	if err != nil {
		t.Fatalf("AcquireLease(%q, %q): %v", boundary, holder, err)
	}
	if l.Boundary != boundary || l.Holder != holder || l.Term == 0 {
		t.Fatalf("AcquireLease(%q, %q) = %+v", boundary, holder, l)
	}
	return l
}

// waitTaken polls until holder takes the boundary's lease, which happens once
// the current lease has expired in the store's clock.
func waitTaken(t testing.TB, s backend.Store, boundary, holder string) backend.Lease {
	t.Helper()
	var l backend.Lease
	testutil.Eventually(t, "another holder takes the expired lease", 10*time.Second, 10*time.Millisecond, func() bool {
		var err error
		l, err = s.AcquireLease(context.Background(), boundary, holder, nil, longTTL)
		if err != nil {
			wantErr(t, "AcquireLease of an unexpired lease", err, event.ErrLeaseHeld)
			return false
		}
		return true
	})
	return l
}

func testCheckpoints(t *testing.T, open func(t *testing.T) backend.Store) {
	t.Run("CheckpointStartsAtZero", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "orders")
		if cp := checkpoint(t, s, "orders"); cp != 0 {
			t.Fatalf("checkpoint of a new boundary = %d, want 0", cp)
		}
	})

	t.Run("CheckpointOnlyMovesForward_I3", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "orders")
		mustAppend(t, s, "orders", batch(t, "orders", 10, "order.placed"), nil)
		l := acquire(t, s, "orders", "n1", longTTL)
		ctx := t.Context()
		for _, c := range []struct{ save, want uint64 }{{3, 3}, {3, 3}, {2, 3}, {0, 3}, {7, 7}, {10, 10}, {1, 10}} {
			if err := s.SaveCheckpoint(ctx, "orders", l, c.save); err != nil {
				t.Fatalf("SaveCheckpoint(%d): %v", c.save, err)
			}
			if cp := checkpoint(t, s, "orders"); cp != c.want {
				t.Fatalf("I3: after saving %d the checkpoint is %d, want %d (it never moves back)", c.save, cp, c.want)
			}
		}
	})

	t.Run("CheckpointNeverBeyondHead_I3", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "orders")
		mustAppend(t, s, "orders", batch(t, "orders", 4, "order.placed"), nil)
		l := acquire(t, s, "orders", "n1", longTTL)
		if err := s.SaveCheckpoint(t.Context(), "orders", l, 2); err != nil {
			t.Fatal(err)
		}
		err := s.SaveCheckpoint(t.Context(), "orders", l, 5)
		wantErr(t, "SaveCheckpoint beyond the head", err, event.ErrInvalid)
		if cp := checkpoint(t, s, "orders"); cp != 2 {
			t.Fatalf("I3: checkpoint = %d after a refused save, want 2", cp)
		}
		if err := s.SaveCheckpoint(t.Context(), "orders", l, 4); err != nil {
			t.Fatalf("SaveCheckpoint at the head: %v", err)
		}
	})

	t.Run("CheckpointFencedByTerm_I6", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "orders")
		ctx := t.Context()
		mustAppend(t, s, "orders", batch(t, "orders", 10, "order.placed"), nil)

		err := s.SaveCheckpoint(ctx, "orders", backend.Lease{Boundary: "orders", Holder: "n1", Term: 1}, 1)
		wantErr(t, "SaveCheckpoint without any lease", err, event.ErrLeaseLost)

		old := acquire(t, s, "orders", "n1", longTTL)
		if err := s.SaveCheckpoint(ctx, "orders", old, 3); err != nil {
			t.Fatal(err)
		}
		for name, l := range map[string]backend.Lease{
			"another holder, same term": {Boundary: "orders", Holder: "n2", Term: old.Term},
			"same holder, other term":   {Boundary: "orders", Holder: "n1", Term: old.Term + 1},
		} {
			err := s.SaveCheckpoint(ctx, "orders", l, 5)
			wantErr(t, "SaveCheckpoint by "+name, err, event.ErrLeaseLost)
		}

		// n1 goes stale: n2 takes over with the next term.
		if err := s.ReleaseLease(ctx, old); err != nil {
			t.Fatal(err)
		}
		cur := acquire(t, s, "orders", "n2", longTTL)
		if cur.Term != old.Term+1 {
			t.Fatalf("takeover term = %d, want %d", cur.Term, old.Term+1)
		}
		err = s.SaveCheckpoint(ctx, "orders", old, 9)
		wantErr(t, "I6: SaveCheckpoint with a stale term", err, event.ErrLeaseLost)
		if cp := checkpoint(t, s, "orders"); cp != 3 {
			t.Fatalf("I6: a stale term's save moved the checkpoint to %d, want 3", cp)
		}
		if err := s.SaveCheckpoint(ctx, "orders", cur, 6); err != nil {
			t.Fatalf("SaveCheckpoint by the current term: %v", err)
		}
		// Even a stale save of a lower value is refused, not silently
		// ignored: the publisher must learn that it lost the lease.
		err = s.SaveCheckpoint(ctx, "orders", old, 1)
		wantErr(t, "I6: stale save of a lower value", err, event.ErrLeaseLost)
		if cp := checkpoint(t, s, "orders"); cp != 6 {
			t.Fatalf("checkpoint = %d, want 6", cp)
		}
	})
}

func testLeases(t *testing.T, open func(t *testing.T) backend.Store) {
	t.Run("NoLeaseIsZero", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "orders")
		l, err := s.LeaseHolder(t.Context(), "orders")
		if err != nil {
			t.Fatal(err)
		}
		if l != (backend.Lease{}) {
			t.Fatalf("LeaseHolder before any lease = %+v, want the zero Lease", l)
		}
	})

	t.Run("AcquireRenewHeld", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "orders")
		ctx := t.Context()
		start := time.Now()
		l := acquire(t, s, "orders", "n1", longTTL)
		if l.Term != 1 {
			t.Fatalf("first term = %d, want 1", l.Term)
		}
		if l.Expires.Before(start.Add(longTTL-5*time.Second)) || l.Expires.After(time.Now().Add(longTTL+5*time.Second)) {
			t.Fatalf("Expires = %v, want about now + %s", l.Expires, longTTL)
		}
		cur, err := s.LeaseHolder(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		if cur.Holder != "n1" || cur.Term != 1 || cur.Boundary != "orders" {
			t.Fatalf("LeaseHolder = %+v, want n1 term 1", cur)
		}

		held, err := s.AcquireLease(ctx, "orders", "n2", nil, longTTL)
		wantErr(t, "AcquireLease of a lease another holder has", err, event.ErrLeaseHeld)
		if held.Holder != "n1" || held.Term != 1 || !held.Expires.After(time.Now()) {
			t.Fatalf("ErrLeaseHeld came with %+v, want n1's unexpired term 1", held)
		}

		// The holder acquiring again renews: same term.
		again := acquire(t, s, "orders", "n1", 2*longTTL)
		if again.Term != 1 || !again.Expires.After(l.Expires) {
			t.Fatalf("re-acquire by the holder = %+v, want term 1 and a later expiry than %v", again, l.Expires)
		}
		renewed, err := s.RenewLease(ctx, again, 3*longTTL)
		if err != nil {
			t.Fatal(err)
		}
		if renewed.Term != 1 || renewed.Holder != "n1" || !renewed.Expires.After(again.Expires) {
			t.Fatalf("RenewLease = %+v, want term 1 and a later expiry than %v", renewed, again.Expires)
		}
		_, err = s.RenewLease(ctx, backend.Lease{Boundary: "orders", Holder: "n2", Term: 1}, longTTL)
		wantErr(t, "RenewLease by a holder without the lease", err, event.ErrLeaseLost)
	})

	t.Run("ExpiryThenTakeoverWithNextTerm", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "orders")
		old := acquire(t, s, "orders", "n1", shortTTL)
		cur := waitTaken(t, s, "orders", "n2")
		if cur.Term != old.Term+1 || cur.Holder != "n2" {
			t.Fatalf("takeover = %+v, want n2 with term %d", cur, old.Term+1)
		}
		_, err := s.RenewLease(t.Context(), old, longTTL)
		wantErr(t, "RenewLease with a stale term", err, event.ErrLeaseLost)
		_, err = s.AcquireLease(t.Context(), "orders", "n1", nil, longTTL)
		wantErr(t, "AcquireLease by the old holder", err, event.ErrLeaseHeld)
		if l, _ := s.LeaseHolder(t.Context(), "orders"); l.Holder != "n2" || l.Term != cur.Term {
			t.Fatalf("LeaseHolder = %+v, want n2 term %d", l, cur.Term)
		}
	})

	t.Run("ReacquireAfterOwnExpiryIsNewTerm", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "orders")
		old := acquire(t, s, "orders", "n1", shortTTL)
		// Expiry is what this test is about, so it waits for it.
		time.Sleep(shortTTL + 50*time.Millisecond)
		_, err := s.RenewLease(t.Context(), old, longTTL)
		wantErr(t, "RenewLease after expiry", err, event.ErrLeaseLost)
		l := acquire(t, s, "orders", "n1", longTTL)
		if l.Term != old.Term+1 {
			t.Fatalf("re-acquire after expiry: term %d, want %d (every expiry ends a term)", l.Term, old.Term+1)
		}
	})

	t.Run("ReleaseLetsAnotherTakeAtOnce", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "orders")
		ctx := t.Context()
		old := acquire(t, s, "orders", "n1", longTTL)
		if err := s.ReleaseLease(ctx, old); err != nil {
			t.Fatal(err)
		}
		cur := acquire(t, s, "orders", "n2", longTTL)
		if cur.Term != old.Term+1 {
			t.Fatalf("term after release = %d, want %d", cur.Term, old.Term+1)
		}
		// Releasing a lease not held (any more) is no error and changes
		// nothing.
		if err := s.ReleaseLease(ctx, old); err != nil {
			t.Fatalf("ReleaseLease of a stale term: %v", err)
		}
		if err := s.ReleaseLease(ctx, backend.Lease{Boundary: "orders", Holder: "n9", Term: 7}); err != nil {
			t.Fatalf("ReleaseLease never held: %v", err)
		}
		if _, err := s.RenewLease(ctx, cur, longTTL); err != nil {
			t.Fatalf("the current holder's lease was hurt by a stale release: %v", err)
		}
	})

	t.Run("GoneHolderLosesItsLeaseAtOnce_I6", func(t *testing.T) {
		// A restarted node names its dead previous process in gone: that
		// process's unexpired lease is taken at once, with the next term,
		// and whatever the dead term still sends is refused (I6).
		t.Parallel()
		s := setup(t, open, "orders")
		ctx := t.Context()
		mustAppend(t, s, "orders", batch(t, "orders", 5, "order.placed"), nil)
		old := acquire(t, s, "orders", "n1#old", longTTL)
		if err := s.SaveCheckpoint(ctx, "orders", old, 2); err != nil {
			t.Fatal(err)
		}
		// Someone else's ended processes are no licence.
		cur, err := s.AcquireLease(ctx, "orders", "n2#x", []string{"n2#dead", "n1#older"}, longTTL)
		wantErr(t, "AcquireLease naming other holders gone", err, event.ErrLeaseHeld)
		if cur.Holder != "n1#old" || cur.Term != old.Term || cur.TakenFrom != nil {
			t.Fatalf("ErrLeaseHeld came with %+v, want n1#old's term %d", cur, old.Term)
		}
		l, err := s.AcquireLease(ctx, "orders", "n1#new", []string{"n1#older", "n1#old"}, longTTL)
		if err != nil {
			t.Fatalf("AcquireLease of a gone holder's unexpired lease: %v", err)
		}
		if l.Holder != "n1#new" || l.Term != old.Term+1 {
			t.Fatalf("takeover = %+v, want n1#new with term %d", l, old.Term+1)
		}
		if w := l.TakenFrom; w == nil || w.Holder != "n1#old" || w.Term != old.Term || !w.Expires.After(time.Now()) {
			t.Fatalf("TakenFrom = %+v, want n1#old's unexpired term %d", w, old.Term)
		}
		if got, err := s.LeaseHolder(ctx, "orders"); err != nil || got.Holder != "n1#new" || got.Term != l.Term {
			t.Fatalf("LeaseHolder = %+v, %v; want n1#new term %d", got, err, l.Term)
		}
		_, err = s.RenewLease(ctx, old, longTTL)
		wantErr(t, "RenewLease of the gone holder's term", err, event.ErrLeaseLost)
		err = s.SaveCheckpoint(ctx, "orders", old, 5)
		wantErr(t, "I6: SaveCheckpoint with the gone holder's term", err, event.ErrLeaseLost)
		if cp := checkpoint(t, s, "orders"); cp != 2 {
			t.Fatalf("I6: checkpoint = %d after a stale save, want 2", cp)
		}
		if err := s.SaveCheckpoint(ctx, "orders", l, 5); err != nil {
			t.Fatalf("SaveCheckpoint with the new term: %v", err)
		}
		// The new holder acquiring again renews its own term, and the gone
		// holder cannot come back while it is live.
		again, err := s.AcquireLease(ctx, "orders", "n1#new", []string{"n1#old"}, longTTL)
		if err != nil || again.Term != l.Term || again.TakenFrom != nil {
			t.Fatalf("re-acquire by the new holder = %+v, %v; want term %d, nothing taken", again, err, l.Term)
		}
		_, err = s.AcquireLease(ctx, "orders", "n1#old", nil, longTTL)
		wantErr(t, "AcquireLease by the gone holder", err, event.ErrLeaseHeld)
	})

	t.Run("GoneHolderOfAFreeLeaseIsNoTakeover", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "orders")
		old := acquire(t, s, "orders", "n1#old", longTTL)
		if err := s.ReleaseLease(t.Context(), old); err != nil {
			t.Fatal(err)
		}
		l, err := s.AcquireLease(t.Context(), "orders", "n1#new", []string{"n1#old"}, longTTL)
		if err != nil || l.Term != old.Term+1 || l.TakenFrom != nil {
			t.Fatalf("AcquireLease of a released lease = %+v, %v; want term %d and no TakenFrom (nothing was live)", l, err, old.Term+1)
		}
	})

	t.Run("ReleaseIsAnnounced", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "orders", "billing")
		released, notify := Notified(16)
		s.OnLeaseReleased(notify)
		l := acquire(t, s, "billing", "n1", longTTL)
		if err := s.ReleaseLease(t.Context(), l); err != nil {
			t.Fatal(err)
		}
		WantNotified(t, released, "billing", 10*time.Second, "OnLeaseReleased")
	})

	t.Run("ConcurrentAcquireOneWinner", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "orders")
		const nodes = 8
		got := make([]backend.Lease, nodes)
		errs := make([]error, nodes)
		testutil.AtOnce(nodes, func(i int) {
			got[i], errs[i] = s.AcquireLease(context.Background(), "orders", "node-"+string(rune('a'+i)), nil, longTTL)
		})
		winners := 0
		for i := range nodes {
			if errs[i] == nil {
				winners++
				if got[i].Term != 1 {
					t.Fatalf("winner's term = %d, want 1", got[i].Term)
				}
				continue
			}
			wantErr(t, "a losing AcquireLease", errs[i], event.ErrLeaseHeld)
		}
		if winners != 1 {
			t.Fatalf("%d nodes acquired the lease at once, want 1", winners)
		}
	})
}

func testNotifier(t *testing.T, open func(t *testing.T) backend.Store) {
	t.Run("OnAppendAfterCommit", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "orders", "billing")
		type call struct {
			boundary string
			head     uint64 // the last position readable in the callback
			err      error
		}
		calls := make(chan call, 64)
		s.OnAppend(func(boundary string) {
			// The events must be committed and readable when fn runs.
			_, events, err := s.Read(context.Background(), boundary, 0, 1000, nil)
			c := call{boundary: boundary, err: err}
			if len(events) > 0 {
				c.head = events[len(events)-1].Position
			}
			select {
			case calls <- c:
			default:
			}
		})
		for _, b := range []string{"orders", "billing", "orders"} {
			// A boundary may be announced more than once per commit (a
			// store's own call and its database's notification, which
			// can arrive late): let those of the earlier appends come in
			// first, so a late one is not taken for this append's.
			for quiet := false; !quiet; {
				select {
				case <-calls:
				case <-time.After(500 * time.Millisecond):
					quiet = true
				}
			}
			res := mustAppend(t, s, b, batch(t, b, 3, "x"), nil)
			deadline := time.After(10 * time.Second)
			for done := false; !done; {
				select {
				case c := <-calls:
					if c.err != nil {
						t.Fatalf("Read inside the OnAppend callback: %v", c.err)
					}
					if c.boundary == b && c.head >= res.Last {
						done = true
					} else if c.boundary == b {
						t.Fatalf("OnAppend(%q) fired when only %d of %d..%d were readable; it must fire after the commit",
							b, c.head, res.First, res.Last)
					}
				case <-deadline:
					t.Fatalf("OnAppend was not called for %q", b)
				}
			}
		}
	})
}
