package postgres

import (
	"context"
	"slices"
	"testing"

	"github.com/orisun-io/orisun/backend/backendtest"
)

// TestReadBackwardSeesOnlyCommitted_I1: while an appender holds its
// transaction open with its events inserted (positions drawn, not
// committed), a backward read from the head returns the committed events
// only, from the committed head down, without waiting for the holder; once
// it commits, the same read starts at its last event.
func TestReadBackwardSeesOnlyCommitted_I1(t *testing.T) {
	t.Parallel()
	s := setup(t, Config{})
	backendtest.Create(t, s, "b")
	ctx := context.Background()
	if _, err := s.Append(ctx, "b", backendtest.Prepared(t, "b", 5), nil); err != nil {
		t.Fatal(err)
	}
	first, last, commit := holdHead(t, s, "b", 3)
	if first != 6 || last != 8 {
		t.Fatalf("the held append drew %d..%d, want 6..8", first, last)
	}
	read := func() []uint64 {
		t.Helper()
		_, events, err := s.ReadBackward(ctx, "b", 0, 4, nil)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]uint64, len(events))
		for i, e := range events {
			out[i] = e.Position
		}
		return out
	}
	if got := read(); !slices.Equal(got, []uint64{5, 4, 3, 2}) {
		t.Fatalf("ReadBackward with an append held open = %v, want [5 4 3 2]: only what committed", got)
	}
	commit()
	if got := read(); !slices.Equal(got, []uint64{8, 7, 6, 5}) {
		t.Fatalf("ReadBackward after the commit = %v, want [8 7 6 5]", got)
	}
}
