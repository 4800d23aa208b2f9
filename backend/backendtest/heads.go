package backendtest

import (
	"testing"

	"github.com/orisun-io/orisun/backend"
)

// testHeads: the shared head read (backend.HeadReader), which the relay
// uses to wake only the publishers that are behind (I4), reports every
// boundary by name with the epoch and committed head that Boundary reads,
// and no held head row while no transaction is open.
func testHeads(t *testing.T, open func(t *testing.T) backend.Store) {
	s := setup(t, open, "hd_busy", "hd_idle", "hd_other")
	ctx := t.Context()
	mustAppend(t, s, "hd_busy", prep(t, "hd_busy", ev("a"), ev("b"), ev("c")), nil)
	mustAppend(t, s, "hd_other", prep(t, "hd_other", ev("a")), nil)
	mustAppend(t, s, "hd_busy", prep(t, "hd_busy", ev("d")), nil)
	heads, err := s.Heads(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"hd_busy", "hd_idle", "hd_other"}
	if len(heads) != len(names) {
		t.Fatalf("Heads = %+v, want %v", heads, names)
	}
	for i, name := range names {
		b := mustBoundary(t, s, name)
		if heads[i].Boundary != b || heads[i].Held {
			t.Errorf("Heads[%d] = %+v, want %+v, not held (by name, committed heads)", i, heads[i], b)
		}
	}
	if heads[0].Boundary.Head != 4 || heads[1].Boundary.Head != 0 || heads[2].Boundary.Head != 1 {
		t.Errorf("heads %d, %d, %d; want 4, 0, 1", heads[0].Boundary.Head, heads[1].Boundary.Head, heads[2].Boundary.Head)
	}
}
