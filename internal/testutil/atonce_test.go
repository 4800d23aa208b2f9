package testutil

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestAtOnce: every call runs once, with its own index, and all run at the
// same time: each waits until all n have begun, which calls made one
// after another would never see.
func TestAtOnce(t *testing.T) {
	const n = 16
	var begun atomic.Int64
	var alone atomic.Int64
	seen := make([]atomic.Int64, n)
	deadline := time.Now().Add(10 * time.Second)
	AtOnce(n, func(i int) {
		seen[i].Add(1)
		begun.Add(1)
		for begun.Load() < n {
			if time.Now().After(deadline) {
				alone.Add(1)
				return
			}
			time.Sleep(time.Millisecond)
		}
	})
	if a := alone.Load(); a != 0 {
		t.Fatalf("%d calls waited up to 10 s for the others to begin: the calls do not run at once", a)
	}
	for i := range seen {
		if k := seen[i].Load(); k != 1 {
			t.Fatalf("fn(%d) ran %d times, want once", i, k)
		}
	}
}
