package statushttp

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/orisun-io/orisun/status"
)

var (
	bl = []string{"boundary"}

	descInfo      = prometheus.NewDesc("orisun_build_info", "Always 1; the labels name the node and its version.", []string{"node_id", "version"}, nil)
	descStoreUp   = prometheus.NewDesc("orisun_store_up", "1 when the store answered during this scrape, else 0.", []string{"backend"}, nil)
	descNATSUp    = prometheus.NewDesc("orisun_nats_up", "1 when NATS JetStream answered during this scrape, else 0.", nil, nil)
	descSettled   = prometheus.NewDesc("orisun_settled", "1 when every boundary's published position equals its head, measured during this scrape.", nil, nil)
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
	descScrapeErr = prometheus.NewDesc("orisun_status_scrape_error", "1 when the status could not be measured at all during this scrape.", nil, nil)
)

var allDescs = []*prometheus.Desc{descInfo, descStoreUp, descNATSUp, descSettled, descMeasured, descHead, descPublished,
	descLagEvents, descLagSecs, descFirst, descLast, descMsgs, descBytes, descState, descSince, descTerm, descHeld,
	descSubs, descFallBacks, descScrapeErr}

// collector measures the status on every scrape.
type collector struct {
	measure func(context.Context) (status.Status, error)
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
	for _, m := range Metrics(st) {
		ch <- m
	}
}

// Metrics turns a status into its Prometheus metrics.
func Metrics(st status.Status) []prometheus.Metric {
	ms := []prometheus.Metric{
		gauge(descInfo, 1, st.NodeID, st.Version),
		gauge(descStoreUp, b2f(st.Store.OK), st.Store.Kind),
		gauge(descNATSUp, b2f(st.NATS.OK)),
		gauge(descSettled, b2f(st.Settled)),
	}
	for _, b := range st.Boundaries {
		n := b.Name
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
