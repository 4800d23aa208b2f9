package statushttp

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/orisun-io/orisun/status"
)

var (
	bl = []string{"boundary"}

	descInfo      = prometheus.NewDesc("orisun_build_info", "Always 1; the labels name the node and its version.", []string{"node_id", "version"}, nil)
	descStoreUp   = prometheus.NewDesc("orisun_store_up", "1 when the store answered during this scrape and no kind of store work is failing (the status's store.ok: the node's last append, checkpoint write, lease write, boundary creation and read each succeeded or was no store failure), else 0.", []string{"backend"}, nil)
	descNATSUp    = prometheus.NewDesc("orisun_nats_up", "1 when NATS JetStream answered during this scrape, else 0.", nil, nil)
	descSettled   = prometheus.NewDesc("orisun_settled", "1 when the status is settled, measured during this scrape: every boundary's published position equals its head, no stream holds a sequence beyond it or of another epoch, every figure was measured, and the store's work is not failing (store.ok).", nil, nil)
	descMeasured  = prometheus.NewDesc("orisun_boundary_measured", "1 when every figure of the boundary was measured during this scrape; 0 when some could not be: those are left out (see /status for the error).", bl, nil)
	descHead      = prometheus.NewDesc("orisun_boundary_head_position", "The last committed position of the boundary.", bl, nil)
	descPublished = prometheus.NewDesc("orisun_boundary_published_position", "The publisher's checkpoint: every position up to it was acknowledged by JetStream.", bl, nil)
	descLagEvents = prometheus.NewDesc("orisun_boundary_lag_events", "head - published.", bl, nil)
	descLagSecs   = prometheus.NewDesc("orisun_boundary_lag_seconds", "Age of the oldest unpublished event (0 when none).", bl, nil)
	descFirst     = prometheus.NewDesc("orisun_stream_first_sequence", "First sequence of the boundary's stream (0 when missing).", bl, nil)
	descLast      = prometheus.NewDesc("orisun_stream_last_sequence", "Last sequence of the boundary's stream (0 when missing).", bl, nil)
	descMsgs      = prometheus.NewDesc("orisun_stream_messages", "Messages held by the boundary's stream.", bl, nil)
	descBytes     = prometheus.NewDesc("orisun_stream_bytes", "Bytes held by the boundary's stream.", bl, nil)
	descState     = prometheus.NewDesc("orisun_publisher_state", "1 for this node's publisher's current state of the boundary, 0 for the others.", []string{"boundary", "state"}, nil)
	descSince     = prometheus.NewDesc("orisun_publisher_state_since_timestamp_seconds", "When this node's publisher entered its current state (Unix time).", bl, nil)
	descTerm      = prometheus.NewDesc("orisun_lease_term", "The boundary's current lease term (any holder).", bl, nil)
	descHeld      = prometheus.NewDesc("orisun_lease_held", "1 when this node holds the boundary's lease.", bl, nil)
	descSubs      = prometheus.NewDesc("orisun_subscriptions", "This node's subscriptions of the boundary, by phase.", []string{"boundary", "phase"}, nil)
	descFallBacks = prometheus.NewDesc("orisun_subscription_fall_backs_total", "How often a live subscription of this node went back to the store.", bl, nil)
	descStaged    = prometheus.NewDesc("orisun_boundary_staged_events", "Events enqueued by committed application transactions (orisun_enqueue, PostgreSQL) and not yet moved into the log; growing: the mover is behind.", bl, nil)
	descSetAside  = prometheus.NewDesc("orisun_boundary_set_aside_events", "Enqueued events the mover set aside, their id being in the log with other content (PostgreSQL; see /status for the latest reason).", bl, nil)
	descScrapeErr = prometheus.NewDesc("orisun_status_scrape_error", "1 when the status could not be measured at all during this scrape.", nil, nil)
)

var allDescs = []*prometheus.Desc{descInfo, descStoreUp, descNATSUp, descSettled, descMeasured, descHead, descPublished,
	descLagEvents, descLagSecs, descFirst, descLast, descMsgs, descBytes, descState, descSince, descTerm, descHeld,
	descSubs, descFallBacks, descStaged, descSetAside, descScrapeErr}

// collector measures the status on every scrape.
type collector struct {
	measure func(context.Context) (status.Status, error)
	label   func(string) string
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st, err := c.measure(context.Background())
	if err != nil {
		ch <- gauge(descScrapeErr, 1)
		return
	}
	ch <- gauge(descScrapeErr, 0)
	for _, m := range Metrics(st, c.label) {
		ch <- m
	}
}

// Metrics turns a status into its Prometheus metrics. label gives a
// boundary's label (nil: its name); the boundaries whose label is not
// their name share one set of series under that label, summed (see
// others).
func Metrics(st status.Status, label func(string) string) []prometheus.Metric {
	ms := []prometheus.Metric{
		gauge(descInfo, 1, st.NodeID, st.Version),
		gauge(descStoreUp, b2f(st.Store.OK), st.Store.Kind),
		gauge(descNATSUp, b2f(st.NATS.OK)),
		gauge(descSettled, b2f(st.Settled)),
	}
	var rest *others
	for _, b := range st.Boundaries {
		n := b.Name
		if label != nil {
			if l := label(n); l != n {
				if rest == nil {
					rest = &others{label: l, measured: true, states: map[status.State]int{}}
				}
				rest.add(b, st.LeaseHolder)
				continue
			}
		}
		ms = append(ms, gauge(descMeasured, b2f(b.Error == "" && b.StreamError == ""), n))
		for _, s := range status.States {
			ms = append(ms, gauge(descState, b2f(b.State == s), n, string(s)))
		}
		if !b.Since.IsZero() {
			ms = append(ms, gauge(descSince, float64(b.Since.UnixNano())/1e9, n))
		}
		ms = append(ms,
			gauge(descSubs, float64(b.SubsCatchingUp), n, "catching_up"),
			gauge(descSubs, float64(b.SubsLive), n, "live"),
			prometheus.MustNewConstMetric(descFallBacks, prometheus.CounterValue, float64(b.SubsFallBacks), n),
		)
		// A figure that was not measured is left out, not reported as 0.
		if b.Error == "" {
			ms = append(ms,
				gauge(descHead, float64(b.Head), n),
				gauge(descPublished, float64(b.Published), n),
				gauge(descLagEvents, float64(b.LagEvents), n),
				gauge(descLagSecs, b.LagSeconds, n),
				gauge(descTerm, float64(b.LeaseTerm), n),
				gauge(descHeld, b2f(b.LeaseHolder != "" && b.LeaseHolder == st.LeaseHolder), n),
			)
			if st.Store.Kind == "postgres" {
				ms = append(ms, gauge(descStaged, float64(b.Staged), n), gauge(descSetAside, float64(b.SetAside), n))
			}
		}
		if b.StreamError == "" {
			ms = append(ms,
				gauge(descFirst, float64(b.StreamFirst), n),
				gauge(descLast, float64(b.StreamLast), n),
				gauge(descMsgs, float64(b.StreamMsgs), n),
				gauge(descBytes, float64(b.StreamBytes), n),
			)
		}
	}
	if rest != nil {
		ms = append(ms, rest.metrics(st.Store.Kind)...)
	}
	return ms
}

// others sums the gauges of the boundaries beyond the node's cap of
// boundary labels into one set of series, so that a node with a thousand
// boundaries exports a bounded number of them and the usual alerts still
// fire: the publisher states count boundaries (a stalled one among them
// shows as orisun_publisher_state{state="stalled"} >= 1), lag_events, staged and set-aside events and
// the stream's messages and bytes are sums, lag_seconds is the largest,
// lease_held counts the leases this node holds, measured is 1 only when
// every one was measured. Positions, terms and the stream's sequences of
// different boundaries mean nothing summed, and are left out.
type others struct {
	label                   string
	n                       int
	measured                bool
	states                  map[status.State]int
	catchingUp, live, falls int64
	lagEvents, msgs, bytes  uint64
	staged, setAside        uint64
	lagSeconds              float64
	held                    int
	storeMeasured, streamOK bool
}

func (o *others) add(b status.BoundaryStatus, holder string) {
	o.n++
	o.measured = o.measured && b.Error == "" && b.StreamError == ""
	o.states[b.State]++
	o.catchingUp += b.SubsCatchingUp
	o.live += b.SubsLive
	o.falls += b.SubsFallBacks
	if b.Error == "" {
		o.storeMeasured = true
		o.lagEvents += b.LagEvents
		o.staged += b.Staged
		o.setAside += b.SetAside
		o.lagSeconds = max(o.lagSeconds, b.LagSeconds)
		if b.LeaseHolder != "" && b.LeaseHolder == holder {
			o.held++
		}
	}
	if b.StreamError == "" {
		o.streamOK = true
		o.msgs += b.StreamMsgs
		o.bytes += b.StreamBytes
	}
}

func (o *others) metrics(kind string) []prometheus.Metric {
	l := o.label
	ms := []prometheus.Metric{gauge(descMeasured, b2f(o.measured), l)}
	for _, s := range status.States {
		ms = append(ms, gauge(descState, float64(o.states[s]), l, string(s)))
	}
	ms = append(ms,
		gauge(descSubs, float64(o.catchingUp), l, "catching_up"),
		gauge(descSubs, float64(o.live), l, "live"),
		prometheus.MustNewConstMetric(descFallBacks, prometheus.CounterValue, float64(o.falls), l),
	)
	if o.storeMeasured {
		ms = append(ms,
			gauge(descLagEvents, float64(o.lagEvents), l),
			gauge(descLagSecs, o.lagSeconds, l),
			gauge(descHeld, float64(o.held), l),
		)
		if kind == "postgres" {
			ms = append(ms, gauge(descStaged, float64(o.staged), l), gauge(descSetAside, float64(o.setAside), l))
		}
	}
	if o.streamOK {
		ms = append(ms, gauge(descMsgs, float64(o.msgs), l), gauge(descBytes, float64(o.bytes), l))
	}
	return ms
}

func gauge(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
