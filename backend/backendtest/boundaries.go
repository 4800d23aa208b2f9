package backendtest

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/event"
)

func testBoundaries(t *testing.T, open func(t *testing.T) backend.Store) {
	t.Run("CreateGetList", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open)
		ctx := t.Context()
		bs, err := s.Boundaries(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(bs) != 0 {
			t.Fatalf("Boundaries of a new store = %v, want none", bs)
		}
		created := map[string]event.Boundary{}
		for _, name := range []string{"orders", "billing", "customers_2"} {
			b, ok, err := s.CreateBoundary(ctx, name)
			if err != nil {
				t.Fatalf("CreateBoundary(%q): %v", name, err)
			}
			if !ok {
				t.Fatalf("CreateBoundary(%q): created = false for a new boundary", name)
			}
			if b.Name != name || b.Head != 0 {
				t.Fatalf("CreateBoundary(%q) = %+v, want that name and head 0", name, b)
			}
			if _, err := uuid.Parse(b.Epoch); err != nil {
				t.Fatalf("CreateBoundary(%q): epoch %q is not a UUID: %v", name, b.Epoch, err)
			}
			created[name] = b
		}
		if created["orders"].Epoch == created["billing"].Epoch {
			t.Fatalf("two boundaries share the epoch %s; each boundary gets its own", created["orders"].Epoch)
		}
		mustAppend(t, s, "orders", batch(t, "orders", 3, "order.placed"), nil)

		got, err := s.Boundary(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		if want := (event.Boundary{Name: "orders", Epoch: created["orders"].Epoch, Head: 3}); got != want {
			t.Fatalf("Boundary(orders) = %+v, want %+v", got, want)
		}
		bs, err = s.Boundaries(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := []event.Boundary{created["billing"], created["customers_2"], created["orders"]}
		want[2].Head = 3
		if len(bs) != len(want) {
			t.Fatalf("Boundaries = %+v, want %+v", bs, want)
		}
		for i := range want {
			if bs[i] != want[i] {
				t.Fatalf("Boundaries = %+v, want %+v (by name, with heads)", bs, want)
			}
		}
	})

	t.Run("CreateIsIdempotent", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open)
		ctx := t.Context()
		first, _, err := s.CreateBoundary(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		mustAppend(t, s, "orders", batch(t, "orders", 2, "order.placed"), nil)
		again, created, err := s.CreateBoundary(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		if created {
			t.Fatal("CreateBoundary of an existing boundary: created = true, want false")
		}
		if again.Epoch != first.Epoch || again.Head != 2 {
			t.Fatalf("CreateBoundary again = %+v, want the existing boundary unchanged (epoch %s, head 2)", again, first.Epoch)
		}
	})

	t.Run("CreateRejectsInvalidName", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open)
		for _, name := range []string{"", "Orders", "1st", "a-b", "a.b", "a b", "x'; DROP TABLE events; --", string(make([]byte, 64))} {
			_, _, err := s.CreateBoundary(t.Context(), name)
			wantErr(t, "CreateBoundary("+name+")", err, event.ErrInvalid)
		}
		bs, err := s.Boundaries(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(bs) != 0 {
			t.Fatalf("invalid names created boundaries: %+v", bs)
		}
	})

	t.Run("UnknownBoundaryIsNotFound", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "orders")
		ctx := context.Background()
		_, err := s.Boundary(ctx, "missing")
		wantErr(t, "Boundary", err, event.ErrNotFound)
		_, err = s.Append(ctx, "missing", batch(t, "missing", 1, "x"), nil)
		wantErr(t, "Append", err, event.ErrNotFound)
		_, err = s.Append(ctx, "missing", batch(t, "missing", 1, "x"), &event.Condition{After: 0})
		wantErr(t, "Append with a condition", err, event.ErrNotFound)
		_, _, err = s.Read(ctx, "missing", 0, 10, nil)
		wantErr(t, "Read", err, event.ErrNotFound)
		_, err = s.Checkpoint(ctx, "missing")
		wantErr(t, "Checkpoint", err, event.ErrNotFound)
		err = s.SaveCheckpoint(ctx, "missing", backend.Lease{Boundary: "missing", Holder: "n1", Term: 1}, 0)
		wantErr(t, "SaveCheckpoint", err, event.ErrNotFound)
		if h := head(t, s, "orders"); h != 0 {
			t.Fatalf("head of orders = %d after appends to a missing boundary, want 0", h)
		}
	})
}
