// Package startstoptest puts a part's Start and Stop under stress (river's
// rivershared/startstoptest): many goroutines call them at once on the same
// part, and the test fails on a data race (under -race), a deadlock, an
// inconsistent answer or a goroutine left behind. It is orisun's machinery: its API
// may change without notice.
package startstoptest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orisun-io/orisun/internal/startstop"
)

// Part is what Stress drives.
type Part interface {
	Start(ctx context.Context) error
	Stop() error
}

// Options tune Stress.
type Options struct {
	// Rounds is how many parts are made (default 20); Workers how many
	// goroutines hammer each one (default 8), each calling Start and Stop
	// Calls times (default 5) in an order of its own.
	Rounds, Workers, Calls int
	// Stopped reports whether err is the part's answer to a Start after
	// Stop (default: errors.Is(err, startstop.ErrStopped)).
	Stopped func(error) bool
	// Check, when set, is called once a part is stopped, to check what
	// only that part can tell (its address no longer answers, its
	// operations fail as closed).
	Check func(t testing.TB, p Part)
	// Timeout bounds one round (default one minute): a round that takes
	// longer is a deadlock, and every goroutine's stack is printed.
	Timeout time.Duration
}

// Stress makes o.Rounds parts with newPart and has o.Workers goroutines
// call Start and Stop on each at once. Every Start must return nil or a
// stopped error (o.Stopped); every Stop of one part must return the same
// error (the first Stop's, which the others wait for); once every worker is
// done, Stop again must return that error and Start a stopped error, and
// no goroutine started with startstop.Base.Go may still run. The first
// round is a warm-up: goroutines alive after it (the process's
// lazily started ones) are not counted; after the last round, no goroutine
// started since may remain.
func Stress(t testing.TB, newPart func(t testing.TB) Part, o Options) {
	t.Helper()
	if o.Rounds <= 0 {
		o.Rounds = 20
	}
	if o.Workers <= 0 {
		o.Workers = 8
	}
	if o.Calls <= 0 {
		o.Calls = 5
	}
	if o.Stopped == nil {
		o.Stopped = func(err error) bool { return errors.Is(err, startstop.ErrStopped) }
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Minute
	}
	var before map[string]bool
	for round := 0; round < o.Rounds; round++ {
		p := newPart(t)
		if !stressOne(t, p, o, round) {
			return
		}
		if o.Check != nil {
			o.Check(t, p)
		}
		if t.Failed() {
			return
		}
		if round == 0 {
			before = goroutines()
		}
	}
	NoNewGoroutines(t, before, 10*time.Second)
}

// stressOne hammers one part; false when the round failed.
func stressOne(t testing.TB, p Part, o Options, round int) bool {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu       sync.Mutex
		stopErrs []error
		bad      []string
		wg       sync.WaitGroup
	)
	for w := 0; w < o.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := 0; c < o.Calls; c++ {
				// Each worker has an order of its own: some start first,
				// some stop first, some start twice.
				switch (w + c) % 4 {
				case 0, 3:
					if err := p.Start(ctx); err != nil && !o.Stopped(err) {
						mu.Lock()
						bad = append(bad, fmt.Sprintf("worker %d: Start: %v", w, err))
						mu.Unlock()
					}
				case 1:
					err := p.Stop()
					mu.Lock()
					stopErrs = append(stopErrs, err)
					mu.Unlock()
				case 2:
					runtime.Gosched()
				}
			}
			err := p.Stop()
			mu.Lock()
			stopErrs = append(stopErrs, err)
			mu.Unlock()
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(o.Timeout):
		t.Errorf("round %d: Start and Stop did not return within %s (a deadlock?); goroutines:\n%s", round, o.Timeout, stacks())
		return false
	}
	for _, b := range bad {
		t.Errorf("round %d: %s", round, b)
	}
	first := stopErrs[0]
	for _, err := range stopErrs {
		if fmt.Sprint(err) != fmt.Sprint(first) {
			t.Errorf("round %d: Stop returned %v and %v: every Stop of a part must return the same", round, first, err)
			break
		}
	}
	if err := p.Stop(); fmt.Sprint(err) != fmt.Sprint(first) {
		t.Errorf("round %d: Stop after the stress returned %v, the others %v", round, err, first)
	}
	if err := p.Start(ctx); !o.Stopped(err) {
		t.Errorf("round %d: Start after Stop returned %v, want a stopped error", round, err)
	}
	if left := runningOwned(); left != "" {
		t.Errorf("round %d: goroutines started with startstop.Base.Go still run after Stop returned:\n%s", round, left)
	}
	return !t.Failed()
}

// runningOwned returns the stacks of the goroutines started with
// startstop.Base.Go that still run their function: Stop must have waited
// for every one. A goroutine past its function (in the wrapper that marks
// it done, or the runtime's exit) is not counted.
func runningOwned() string {
	const goFunc = "github.com/orisun-io/orisun/internal/startstop.(*Base).Go"
	var left strings.Builder
	for _, g := range strings.Split(stacks(), "\n\n") {
		if !strings.Contains(g, "\ncreated by "+goFunc+" ") {
			continue
		}
		for _, line := range strings.Split(g, "\n")[1:] {
			if line == "" || strings.HasPrefix(line, "\t") || strings.HasPrefix(line, "created by ") {
				continue
			}
			if !strings.HasPrefix(line, goFunc+".func") && !strings.HasPrefix(line, "sync.") && !strings.HasPrefix(line, "runtime.") {
				left.WriteString(g)
				left.WriteString("\n\n")
				break
			}
		}
	}
	return left.String()
}

// goroutines returns the ids of the goroutines alive now.
func goroutines() map[string]bool {
	ids := map[string]bool{}
	for _, g := range strings.Split(stacks(), "\n\n") {
		if id, ok := goroutineID(g); ok {
			ids[id] = true
		}
	}
	return ids
}

func goroutineID(stack string) (string, bool) {
	rest, ok := strings.CutPrefix(stack, "goroutine ")
	if !ok {
		return "", false
	}
	id, _, ok := strings.Cut(rest, " ")
	return id, ok
}

func stacks() string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}

// NoNewGoroutines fails t when, within wait, goroutines that are not in
// before (goroutine ids) are still alive, printing their stacks.
func NoNewGoroutines(t testing.TB, before map[string]bool, wait time.Duration) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		var left bytes.Buffer
		for _, g := range strings.Split(stacks(), "\n\n") {
			id, ok := goroutineID(g)
			if ok && !before[id] && !strings.Contains(g, "startstoptest.stacks") {
				left.WriteString(g)
				left.WriteString("\n\n")
			}
		}
		if left.Len() == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("goroutines left behind after the stress (%s after the last Stop):\n%s", wait, left.String())
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
