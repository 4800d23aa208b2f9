// Package gctune keeps the Go garbage collector's room in proportion to
// the part of a node's heap that is not its memory streams. It is orisun's
// machinery and may change without notice.
//
// An embedded JetStream server keeps its memory streams in the Go heap, and
// they are live: with the runtime's default (GOGC=100) the collector lets
// the heap grow to twice what the last collection found live, streams
// included, so a node whose streams hold 500 MB would grow to more than a
// gigabyte before collecting garbage it made while publishing a few
// megabytes a second. The tuner sets the collector's percentage so that the
// room it leaves is what GOGC=100 would leave for the rest of the heap,
// never less than MinRoom unless that is more than GOGC=100 would leave
// the whole heap (a heap under MinRoom keeps the runtime's default; giving
// it MinRoom was measured and not kept, docs/performance.md):
//
//	room    = max(live − streams, MinRoom)
//	percent = clamp(100 × room / live, MinPercent, 100)
//
// where live is the heap the last collection found live and streams the
// bytes the registered servers' memory streams hold. A node then needs
// about its streams' bytes plus twice the rest (docs/performance.md,
// "How much memory a node needs").
//
// The tuner is process-wide (the collector's percentage is one setting of
// the process): every embedded server registers its streams' bytes, one
// goroutine runs while any is registered, and the percentage found at the
// first registration is restored after the last. It leaves the collector
// alone when GOGC is set in the environment, and it retires for the rest of
// the process, with one log line, when it finds the percentage changed by
// someone else (a program that embeds orisun and tunes its own collector).
package gctune

import (
	"log/slog"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

const (
	// MinRoom is the least room the tuner leaves the collector: below it,
	// a node that holds little besides its streams would collect every few
	// megabytes of garbage.
	MinRoom = 64 << 20
	// MinPercent is the lowest percentage the tuner sets.
	MinPercent = 10
	// BasePercent is the highest: the runtime's default.
	BasePercent = 100
	// Interval is how often the tuner reads the heap and the streams.
	Interval = time.Second
)

// Percent is the collector percentage for a heap of live bytes of which
// streams are memory streams.
func Percent(live, streams int64) int {
	if live <= 0 {
		return BasePercent
	}
	room := max(live-streams, MinRoom)
	p := int(100 * room / live)
	return min(max(p, MinPercent), BasePercent)
}

// state is the tuner's: its sources and its goroutine.
type state struct {
	// life is held through all of Register and remove, the wait for the
	// goroutine's end included, so that a node starting while the last
	// one stops never reads the percentage the stopping one set.
	life sync.Mutex
	// mu guards the rest; the goroutine takes it, never life.
	mu      sync.Mutex
	sources map[int]func() int64
	next    int
	stop    chan struct{}
	done    chan struct{}
	orig    int  // the percentage found at the first registration
	set     int  // the percentage the tuner set last
	retired bool // someone else set the percentage: hands off for good
	log     *slog.Logger
}

// tuner is the process's one tuner.
var tuner state

// interval is Interval; a test shortens it.
var interval = Interval

// Register adds a source of memory-stream bytes (an embedded server's) and
// starts the tuner if it is the first. The returned function removes it;
// after the last, the tuner stops and puts back the percentage it found,
// unless someone else changed it meanwhile. Without effect when GOGC is
// set in the environment or the tuner retired.
func Register(streams func() int64, log *slog.Logger) (unregister func()) {
	if os.Getenv("GOGC") != "" {
		return func() {}
	}
	t := &tuner
	t.life.Lock()
	defer t.life.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.retired {
		return func() {}
	}
	if t.sources == nil {
		t.sources = map[int]func() int64{}
	}
	if len(t.sources) == 0 {
		t.orig = debug.SetGCPercent(BasePercent)
		if t.orig != BasePercent {
			// The program set its own percentage before this node started.
			debug.SetGCPercent(t.orig)
			t.retire(log, t.orig, BasePercent)
			return func() {}
		}
		t.set, t.log = BasePercent, log
		t.stop, t.done = make(chan struct{}), make(chan struct{})
		go run(t.stop, t.done)
	}
	id := t.next
	t.next++
	t.sources[id] = streams
	var once sync.Once
	return func() { once.Do(func() { remove(id) }) }
}

func remove(id int) {
	t := &tuner
	t.life.Lock()
	defer t.life.Unlock()
	t.mu.Lock()
	if _, ok := t.sources[id]; !ok {
		t.mu.Unlock()
		return
	}
	delete(t.sources, id)
	if len(t.sources) > 0 {
		t.mu.Unlock()
		return
	}
	stop, done := t.stop, t.done
	t.stop, t.done = nil, nil
	t.mu.Unlock()
	close(stop)
	<-done
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.retired {
		return
	}
	// Put back what was found, unless the program changed it since the
	// last tick: then it keeps its own.
	if found := debug.SetGCPercent(t.orig); found != t.set {
		debug.SetGCPercent(found)
	}
}

// retire stops tuning for the rest of the process. t.mu is held.
func (t *state) retire(log *slog.Logger, found, set int) {
	t.retired = true
	t.sources = nil
	log.Info("the garbage collector's percentage was set by the program: orisun leaves it alone",
		"gc_percent", found, "orisun_set", set)
}

// run tunes every Interval until stop is closed.
func run(stop, done chan struct{}) {
	defer close(done)
	t := &tuner
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var sources []func() int64
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		// The sources are read outside the lock: a slow server must not
		// hold up a node's start or stop.
		t.mu.Lock()
		sources = sources[:0]
		for _, f := range t.sources {
			sources = append(sources, f)
		}
		t.mu.Unlock()
		var streams int64
		for _, f := range sources {
			streams += f()
		}
		p := Percent(HeapLive(), streams)
		t.mu.Lock()
		if t.retired {
			t.mu.Unlock()
			return
		}
		if found := debug.SetGCPercent(p); found != t.set {
			debug.SetGCPercent(found)
			t.retire(t.log, found, t.set)
			t.mu.Unlock()
			return
		}
		t.set = p
		t.mu.Unlock()
	}
}

// Sources is how many sources are registered: 0 when the tuner is off.
func Sources() int {
	tuner.mu.Lock()
	defer tuner.mu.Unlock()
	return len(tuner.sources)
}

// HeapLive is the heap the last collection found live
// (/gc/heap/live:bytes): in a node it holds the memory streams' messages
// too.
func HeapLive() int64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64())
}
