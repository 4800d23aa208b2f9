package serviceutil_test

import (
	"context"
	"testing"
	"time"

	"github.com/orisun-io/orisun/internal/serviceutil"
)

func TestSleepEndsWithContext(t *testing.T) {
	if !serviceutil.Sleep(context.Background(), time.Millisecond) {
		t.Fatal("Sleep with a live context reported false")
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(10*time.Millisecond, cancel)
	start := time.Now()
	if serviceutil.Sleep(ctx, time.Minute) {
		t.Fatal("Sleep whose context ended reported true")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Sleep returned %s after its context ended", d)
	}
}

// TestBackoffDoublesUpToMax: 10, 20, 40, 40 ms, then 10 ms again after a
// Reset; a back-off whose context ended reports false at once.
func TestBackoffDoublesUpToMax(t *testing.T) {
	b := serviceutil.NewBackoff(10*time.Millisecond, 40*time.Millisecond)
	for i, want := range []time.Duration{10, 20, 40, 40} {
		start := time.Now()
		if !b.Wait(context.Background()) {
			t.Fatalf("wait %d reported false", i)
		}
		if d := time.Since(start); d < want*time.Millisecond {
			t.Fatalf("wait %d took %s, want at least %dms", i, d, want)
		}
	}
	b.Reset()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if b.Wait(ctx) {
		t.Fatal("Wait with an ended context reported true")
	}
	// The Wait above counted as one: the next waits 20 ms, not 10.
	start := time.Now()
	b.Wait(context.Background())
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Fatalf("wait after Reset and one Wait took %s, want at least 20ms", d)
	}
}
