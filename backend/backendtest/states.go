package backendtest

import (
	"testing"
	"time"

	"github.com/orisun-io/orisun/backend"
)

// testStates: a store that measures every boundary at once
// (backend.StateReader, used by the status) reports what the per-boundary
// reads report: head, checkpoint, the commit time of the oldest
// unpublished event and the lease (I7: the status is measured).
func testStates(t *testing.T, open func(t *testing.T) backend.Store) {
	s := setup(t, open, "st_busy", "st_idle")
	sr, ok := s.(backend.StateReader)
	if !ok {
		// Every backend of orisun measures its boundaries in one
		// statement: one by one, the status of 1,000 boundaries took 12 s
		// (docs/performance.md). A backend without it fails here rather
		// than pass unmeasured.
		t.Fatalf("%T does not implement backend.StateReader", s)
	}
	ctx := t.Context()
	mustAppend(t, s, "st_busy", prep(t, "st_busy", ev("a"), ev("b"), ev("c")), nil)
	l := acquire(t, s, "st_busy", "node-1", time.Minute)
	if err := s.SaveCheckpoint(ctx, "st_busy", l, 1); err != nil {
		t.Fatal(err)
	}
	states, err := sr.BoundaryStates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]backend.BoundaryState{}
	for _, st := range states {
		got[st.Boundary.Name] = st
	}
	if len(states) != 2 || len(got) != 2 {
		t.Fatalf("BoundaryStates = %+v, want st_busy and st_idle", states)
	}
	for _, name := range []string{"st_busy", "st_idle"} {
		st := got[name]
		b, cp := mustBoundary(t, s, name), checkpoint(t, s, name)
		lease, err := s.LeaseHolder(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if st.Boundary != b || st.Checkpoint != cp {
			t.Errorf("%s: state %+v, checkpoint %d; the boundary reads %+v, checkpoint %d", name, st.Boundary, st.Checkpoint, b, cp)
		}
		if st.Lease.Holder != lease.Holder || st.Lease.Term != lease.Term || !st.Lease.Expires.Equal(lease.Expires) {
			t.Errorf("%s: state lease %+v, LeaseHolder %+v", name, st.Lease, lease)
		}
		var oldest time.Time
		if b.Head > cp {
			_, evs, err := s.Read(ctx, name, cp, 1, nil)
			if err != nil || len(evs) != 1 {
				t.Fatalf("Read(%s after %d): %v, %d events", name, cp, err, len(evs))
			}
			oldest = evs[0].Time
		}
		if !st.OldestUnpublished.Equal(oldest) {
			t.Errorf("%s: oldest unpublished %v, the event after the checkpoint was committed at %v", name, st.OldestUnpublished, oldest)
		}
	}
	if got["st_busy"].Boundary.Head != 3 || got["st_busy"].Checkpoint != 1 || got["st_busy"].OldestUnpublished.IsZero() {
		t.Errorf("st_busy: %+v, want head 3, checkpoint 1 and the time of position 2", got["st_busy"])
	}
	if got["st_idle"].Lease.Holder != "" || !got["st_idle"].OldestUnpublished.IsZero() {
		t.Errorf("st_idle: %+v, want no lease and nothing unpublished", got["st_idle"])
	}
}
