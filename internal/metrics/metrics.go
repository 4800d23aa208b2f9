// Package metrics holds a node's counters and histograms: what happened
// since the process started (appends and reads by result, events
// published, store errors, lease changes), as opposed to the gauges that
// package statushttp measures at scrape time. Being internal, it is
// orisun's machinery: its API may change without notice.
//
// The work is counted where it happens (the node's Append, Read and
// ReadLatest, which serve in-process callers and the NATS API alike; the
// API service's refusals of requests that never reach them; the
// publisher's acknowledged batches; the store wrapper's errors), through
// handles resolved once per boundary: counting an append is a map lookup
// by the boundary's name, two atomic adds and one histogram observation,
// with no label strings built on the way.
//
// Label sets are bounded: at most Max boundaries get series of their own,
// in the order the node first runs them; every other boundary (and a name
// that is no boundary of this node, such as one a refused request gave) is
// counted under boundary="_other". Histograms carry no boundary label.
//
// A nil *Metrics and a nil *Boundary count nothing, so that the
// instrumentation can be switched off as a whole (for measuring its cost).
package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/orisun-io/orisun/api"
)

// Other is the boundary label of the boundaries beyond the cap. Boundary
// names start with a letter, so no boundary can be called this.
const Other = "_other"

// Results are the values of the result label: ok, then the API's error
// codes (docs/protocol.md). An error whose code is not listed counts as
// internal.
var Results = [nResults]string{"ok", api.CodeInvalid, api.CodeNotFound, api.CodeConflict, api.CodeTooLarge,
	api.CodeUnavailable, api.CodeCorrupt, api.CodeInternal}

const (
	nResults       = 8
	resultInternal = nResults - 1
)

// Result is the index in Results of err's result.
func Result(err error) int {
	if err == nil {
		return 0
	}
	code := api.CodeOf(err)
	for i := 1; i < len(Results); i++ {
		if Results[i] == code {
			return i
		}
	}
	return resultInternal
}

// StoreOps are the values of the op label of store errors: the store's
// operations, as the node calls them.
var StoreOps = []string{"append", "read", "latest", "boundary", "boundaries", "create_boundary", "heads",
	"checkpoint", "save_checkpoint", "acquire_lease", "renew_lease", "release_lease", "lease_holder",
	"boundary_states", "head_locked", "probe_write"}

// StoreOp is an index in StoreOps.
type StoreOp int

// The store operations, in the order of StoreOps.
const (
	OpAppend StoreOp = iota
	OpRead
	OpLatest
	OpBoundary
	OpBoundaries
	OpCreateBoundary
	OpHeads
	OpCheckpoint
	OpSaveCheckpoint
	OpAcquireLease
	OpRenewLease
	OpReleaseLease
	OpLeaseHolder
	OpBoundaryStates
	OpHeadLocked
	OpProbeWrite
)

// LeaseChanges are the values of the change label of lease changes.
var LeaseChanges = []string{"acquired", "released", "lost"}

// LeaseChange is an index in LeaseChanges.
type LeaseChange int

// The lease changes, in the order of LeaseChanges.
const (
	LeaseAcquired LeaseChange = iota
	LeaseReleased
	LeaseLost
)

// StoreKinds are the values of the kind label of orisun_store_failing: the
// kinds of store work whose failure the node tracks (see the node's store
// watch).
var StoreKinds = []string{"read", "append", "checkpoint", "lease", "boundary"}

// latencyBuckets span a fast local append (0.5 ms) to a request timeout.
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// Metrics are a node's counters and histograms.
type Metrics struct {
	max int

	appendRequests, appendEvents, readRequests *prometheus.CounterVec
	published, fastPublished, leaseChanges     *prometheus.CounterVec
	appendSeconds, readSeconds, batchSeconds   prometheus.Histogram
	storeErrors                                []prometheus.Counter
	storeErrorsVec                             *prometheus.CounterVec
	storeFailing                               *prometheus.GaugeVec

	mu     sync.RWMutex
	byName map[string]*Boundary
	own    int
	other  *Boundary
}

// New returns the metrics of a node that labels at most max boundaries
// with their own name (0: none; every boundary counts under Other).
func New(max int) *Metrics {
	bl := []string{"boundary", "result"}
	m := &Metrics{
		max: max,
		appendRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orisun_append_requests_total",
			Help: "Append requests (in process and through the NATS API), by boundary and result (ok or the API's error code)."}, bl),
		appendEvents: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orisun_append_events_total",
			Help: "Events in append requests, by boundary and result (a request the API refused before decoding counts none)."}, bl),
		readRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orisun_read_requests_total",
			Help: "Read and read-latest requests (in process and through the NATS API), by boundary and result."}, bl),
		published: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orisun_published_events_total",
			Help: "Events this node's publisher had acknowledged by JetStream, and those it found in the stream after the checkpoint when it took the lead or resumed (published, their acknowledgements not seen), by boundary."}, []string{"boundary"}),
		fastPublished: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orisun_published_fast_batch_events_total",
			Help: "Of orisun_published_events_total, the events published in JetStream fast-ingest batches (full pages of 32 or more, live pages of 100 or more, where the boundary's stream allows batches), by boundary; the rest went as single publishes."},
			[]string{"boundary"}),
		leaseChanges: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orisun_lease_changes_total",
			Help: "This node's lease changes by boundary: acquired, released (a clean end: stop, step-down), lost (a newer term, or expired before renewal)."},
			[]string{"boundary", "change"}),
		appendSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "orisun_append_duration_seconds",
			Help: "Time of the node's Append, from validation to the store's answer, every result.", Buckets: latencyBuckets}),
		readSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "orisun_read_duration_seconds",
			Help: "Time of the node's Read and ReadLatest, every result.", Buckets: latencyBuckets}),
		batchSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "orisun_publish_batch_duration_seconds",
			Help: "Time from sending a publish batch's first message to JetStream's acknowledgement of its last.", Buckets: latencyBuckets}),
		storeErrorsVec: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orisun_store_errors_total",
			Help: "Store operations that failed for the store's sake (unavailable or internal; not a conflict, a missing boundary or a caller's deadline), by operation."},
			[]string{"op"}),
		storeFailing: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "orisun_store_failing",
			Help: "1 while the last store operation of this kind failed for the store's sake (and no write probe succeeded since), else 0."},
			[]string{"kind"}),
		byName: map[string]*Boundary{},
	}
	for _, op := range StoreOps {
		m.storeErrors = append(m.storeErrors, m.storeErrorsVec.WithLabelValues(op))
	}
	for _, k := range StoreKinds {
		m.storeFailing.WithLabelValues(k).Set(0)
	}
	m.other = m.resolve(Other)
	return m
}

// Collectors are what a Prometheus registry serves of m.
func (m *Metrics) Collectors() []prometheus.Collector {
	if m == nil {
		return nil
	}
	return []prometheus.Collector{m.appendRequests, m.appendEvents, m.readRequests, m.published, m.fastPublished, m.leaseChanges,
		m.appendSeconds, m.readSeconds, m.batchSeconds, m.storeErrorsVec, m.storeFailing}
}

// resolve makes the handles of one label value.
func (m *Metrics) resolve(label string) *Boundary {
	b := &Boundary{m: m, label: label}
	for i, r := range Results {
		b.appends[i] = m.appendRequests.WithLabelValues(label, r)
		b.appendEvents[i] = m.appendEvents.WithLabelValues(label, r)
		b.reads[i] = m.readRequests.WithLabelValues(label, r)
	}
	b.published = m.published.WithLabelValues(label)
	b.fastPublished = m.fastPublished.WithLabelValues(label)
	for i, c := range LeaseChanges {
		b.leases[i] = m.leaseChanges.WithLabelValues(label, c)
	}
	return b
}

// Add returns the handles of a boundary the node runs, giving it series of
// its own while fewer than the cap have them, else those of Other. The
// first call decides, for the life of the process, so that a counter never
// moves from one series to another.
func (m *Metrics) Add(name string) *Boundary {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if b, ok := m.byName[name]; ok {
		return b
	}
	b := m.other
	if m.own < m.max {
		m.own++
		b = m.resolve(name)
	}
	m.byName[name] = b
	return b
}

// Boundary returns the handles of a boundary: its own, those of Other when
// it is beyond the cap or not one the node runs (Add was never called).
func (m *Metrics) Boundary(name string) *Boundary {
	if m == nil {
		return nil
	}
	m.mu.RLock()
	b, ok := m.byName[name]
	m.mu.RUnlock()
	if !ok {
		return m.other
	}
	return b
}

// Label is the boundary label the boundary's series carry: its name, or
// Other.
func (m *Metrics) Label(name string) string {
	if m == nil {
		return name
	}
	return m.Boundary(name).label
}

// StoreError counts a failed store operation.
func (m *Metrics) StoreError(op StoreOp) {
	if m == nil {
		return
	}
	m.storeErrors[op].Inc()
}

// StoreFailing sets whether a kind of store work (an index in StoreKinds)
// is failing.
func (m *Metrics) StoreFailing(kind int, failing bool) {
	if m == nil {
		return
	}
	v := 0.0
	if failing {
		v = 1
	}
	m.storeFailing.WithLabelValues(StoreKinds[kind]).Set(v)
}

// Boundary are one boundary label's counters, resolved once.
type Boundary struct {
	m            *Metrics
	label        string
	appends      [nResults]prometheus.Counter
	appendEvents [nResults]prometheus.Counter
	reads        [nResults]prometheus.Counter
	published    prometheus.Counter
	// fastPublished counts the events of published that went in
	// fast-ingest batches.
	fastPublished prometheus.Counter
	leases        [3]prometheus.Counter
}

// Appended counts an append request of events events that ended with err
// after took (took < 0: not timed, as for a request the API refused before
// it reached the node).
func (b *Boundary) Appended(events int, err error, took time.Duration) {
	if b == nil {
		return
	}
	r := Result(err)
	b.appends[r].Inc()
	if events > 0 {
		b.appendEvents[r].Add(float64(events))
	}
	if took >= 0 {
		b.m.appendSeconds.Observe(took.Seconds())
	}
}

// Read counts a read or read-latest request that ended with err after took
// (took < 0: not timed).
func (b *Boundary) Read(err error, took time.Duration) {
	if b == nil {
		return
	}
	b.reads[Result(err)].Inc()
	if took >= 0 {
		b.m.readSeconds.Observe(took.Seconds())
	}
}

// Published counts a batch of events acknowledged by JetStream took after
// its first message was sent; fast: it went as one fast-ingest batch.
func (b *Boundary) Published(events int, took time.Duration, fast bool) {
	if b == nil {
		return
	}
	b.published.Add(float64(events))
	if fast {
		b.fastPublished.Add(float64(events))
	}
	b.m.batchSeconds.Observe(took.Seconds())
}

// Found counts as published the events the publisher found in the stream
// after the checkpoint (publisher.Config.OnFound): published, but their
// acknowledgements never seen by this node's publisher. No batch of this
// node's, so not timed.
func (b *Boundary) Found(events int) {
	if b == nil {
		return
	}
	b.published.Add(float64(events))
}

// Lease counts a change of this node's lease of the boundary.
func (b *Boundary) Lease(c LeaseChange) {
	if b == nil {
		return
	}
	b.leases[c].Inc()
}
