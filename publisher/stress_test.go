package publisher_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/backend/sqlite"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/startstop/startstoptest"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/publisher"
	"github.com/orisun-io/orisun/status"
	"github.com/orisun-io/orisun/stream"
)

// leading is a publisher as its node runs it: leading (a Run its lease
// runner began) while its owner starts and stops it.
type leading struct {
	*publisher.Publisher
	store *watched
	ran   chan error // the Run's result
}

func (l *leading) Stop() error {
	err := l.Publisher.Stop()
	l.store.stopped.Store(true)
	return err
}

// watched is the store of one publisher: it counts the reads and the
// checkpoint writes made once a Stop of the publisher returned.
type watched struct {
	*sqlite.Store
	stopped atomic.Bool
	late    atomic.Int32
}

func (w *watched) Read(ctx context.Context, boundary string, after uint64, limit int, q *event.Query) (string, []event.Event, error) {
	if w.stopped.Load() {
		w.late.Add(1)
	}
	return w.Store.Read(ctx, boundary, after, limit, q)
}

func (w *watched) SaveCheckpoint(ctx context.Context, boundary string, l backend.Lease, pos uint64) error {
	if w.stopped.Load() {
		w.late.Add(1)
	}
	return w.Store.SaveCheckpoint(ctx, boundary, l, pos)
}

// TestPublisherStartStopStress: many goroutines start and stop publishers
// that lead and publish at the same time. Every Stop ends the Run (clean,
// or refused as closed when it began after the Stop), the checkpoint never
// passes the stream (I3), the stream holds the store's events in place
// (I2), and no goroutine of a publisher is left behind.
func TestPublisherStartStopStress(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	l, err := e.store.AcquireLease(ctx, "b", "stress", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	startstoptest.Stress(t, func(t testing.TB) startstoptest.Part {
		// Events to publish while the part is hammered: each round's
		// publisher has work in flight when it is stopped.
		e.append(t, 200)
		w := &watched{Store: e.store}
		p := publisher.New(publisher.Config{Boundary: "b", Store: w, JS: e.js, BatchSize: 20, Window: 8,
			PollInterval: 20 * time.Millisecond})
		lp := &leading{Publisher: p, store: w, ran: make(chan error, 1)}
		go func() { lp.ran <- p.Run(context.Background(), l) }()
		// Stopped while it publishes: the round begins once the first
		// batch is acknowledged.
		testutil.Until(t, "the publisher to lead", 10*time.Second, time.Millisecond, func() error {
			if st := p.Status(); st.State != status.StateLeading {
				return fmt.Errorf("status %+v", st)
			}
			return nil
		})
		return lp
	}, startstoptest.Options{
		Rounds: 15,
		Check: func(t testing.TB, part startstoptest.Part) {
			lp := part.(*leading)
			if n := lp.store.late.Load(); n > 0 {
				t.Errorf("the publisher read or wrote the store %d times after its Stop returned", n)
			}
			// Stop waited for the run; Run hands its result over then.
			select {
			case err := <-lp.ran:
				if err != nil {
					t.Errorf("Run ended with %v, want nil: a Stop is a clean stop", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Run still runs after Stop returned")
			}
			if st := lp.Status(); st.State != status.StateStandby || st.Reason != "stopped" {
				t.Errorf("state %s (%s) after Stop, want standby (stopped)", st.State, st.Reason)
			}
			if err := lp.Run(ctx, l); !errors.Is(err, event.ErrClosed) {
				t.Errorf("Run after Stop: %v, want ErrClosed", err)
			}
			e.checkNeverAhead(t, false)
		},
	})
	e.checkNeverAhead(t, true)
	if cp, err := e.store.Checkpoint(ctx, "b"); err != nil || cp == 0 {
		t.Errorf("checkpoint %d (%v) after the stress: its publishers published nothing, so it proved nothing", cp, err)
	}
}

// checkNeverAhead asserts the checkpoint is at most the stream's last
// sequence (I3) and, when whole, that every message in the stream is the
// store's event at its position (I2, checkStream).
func (e *env) checkNeverAhead(t testing.TB, whole bool) {
	t.Helper()
	ctx := context.Background()
	cp, err := e.store.Checkpoint(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.js.Stream(ctx, stream.Name("b"))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if cp != 0 {
			t.Errorf("checkpoint %d without a stream (I3)", cp)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	info := s.CachedInfo()
	if cp > info.State.LastSeq {
		t.Errorf("checkpoint %d is ahead of the stream's last sequence %d (I3)", cp, info.State.LastSeq)
	}
	if whole && info.State.Msgs > 0 {
		e.checkStream(t)
	}
}
