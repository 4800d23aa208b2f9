package lease_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/backend/sqlite"
	"github.com/orisun-io/orisun/internal/startstop/startstoptest"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/storetest"
	"github.com/orisun-io/orisun/lease"
)

// TestRunnerStartStopStress: many goroutines start and stop lease runners
// at once, half of them already leading. Once Stop returned the leader work
// has returned and the lease is released (a standby takes over at once,
// I6), a Run after Stop returns at once, and no goroutine is left.
func TestRunnerStartStopStress(t *testing.T) {
	ctx := context.Background()
	s := storetest.SQLite(t, sqlite.Config{Dir: t.TempDir()})
	if _, _, err := s.CreateBoundary(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	var leading, led atomic.Int32
	lead := func(ctx context.Context, _ backend.Lease) error {
		if leading.Add(1) > 1 {
			t.Error("two runners lead at once (I6)")
		}
		led.Add(1)
		<-ctx.Done()
		leading.Add(-1)
		return nil
	}
	round := 0
	startstoptest.Stress(t, func(t testing.TB) startstoptest.Part {
		round++
		r := &lease.Runner{Store: s, Holder: "h", TTL: time.Second, Boundary: "b", Lead: lead}
		if round%2 == 0 {
			// Stopped while it leads.
			if err := r.Start(ctx); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, "the runner to lead", 10*time.Second, time.Millisecond, func() bool { return leading.Load() != 0 })
		}
		return r
	}, startstoptest.Options{
		Rounds: 30,
		Check: func(t testing.TB, p startstoptest.Part) {
			r := p.(*lease.Runner)
			if n := leading.Load(); n != 0 {
				t.Fatalf("%d leader works still run after Stop returned", n)
			}
			if cur, err := s.LeaseHolder(ctx, "b"); err != nil || cur.Holder != "" && cur.Expires.After(time.Now()) {
				t.Fatalf("lease %+v (%v) after Stop, want released", cur, err)
			}
			done := make(chan struct{})
			go func() { r.Run(ctx, "b", lead, nil); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("Run after Stop did not return")
			}
		},
	})
	if led.Load() == 0 {
		t.Error("no runner ever led: the stress proved nothing")
	}
}
