package orisun

import (
	"cmp"
	"strconv"
	"strings"
	"time"
)

// Defaults and limits of Config, each written once. Defaults builds from
// the XDefault constants, New fills a zero field from them, Validate checks
// a field against its XMin and XMax, and a test checks README.md's table of
// ORISUN_* variables against Defaults. The names are public API; the
// values are what this release does, and a later one may change a default
// or widen a limit (README.md's table and CHANGELOG.md say so when it does).
const (
	DataDirDefault = "./data"
	BackendDefault = "sqlite"
	// BoundaryDefault is the one boundary created at start-up when
	// Boundaries is nil.
	BoundaryDefault = "default"

	// PGMaxConnsDefault and SQLiteSynchronousDefault are also the
	// backends' own defaults for a zero field (postgres.DefaultMaxConns,
	// sqlite.DefaultSynchronous); TestConfigDefaultsMatchBackends keeps
	// them equal, since a public constant cannot take its value from
	// machinery.
	PGMaxConnsDefault = 8
	PGMaxConnsMin     = 2
	PGMaxConnsMax     = 1000

	SQLiteSynchronousDefault = "FULL"

	NATSHostDefault        = "127.0.0.1"
	NATSPortDefault        = 4222
	NATSClusterHostDefault = "127.0.0.1"
	NATSClusterPortDefault = 6222
	// NATSMonitorHostDefault is the interface of the NATS monitoring
	// endpoint when ORISUN_NATS_MONITOR_ADDR names a port only (the
	// endpoint itself is off unless that is set).
	NATSMonitorHostDefault = "127.0.0.1"

	NATSMaxPayloadDefault = 1 << 20
	NATSMaxPayloadMin     = 1024
	NATSMaxPayloadMax     = 64 << 20

	EventStreamMaxBytesDefault = 512 << 20
	// EventStreamMaxMsgsDefault is -1, unlimited. Zero is unlimited too,
	// so New leaves a zero EventStreamMaxMsgs alone.
	EventStreamMaxMsgsDefault = -1
	EventStreamMaxAgeDefault  = 5 * time.Minute

	StreamReplicasDefault = 1

	PublishBatchDefault = 1000
	PublishBatchMin     = 1
	PublishBatchMax     = 100_000

	PublishWindowDefault = 256
	PublishWindowMin     = 1
	PublishWindowMax     = 65536

	PollIntervalDefault = time.Second
	PollIntervalMin     = time.Millisecond
	PollIntervalMax     = time.Hour

	PollBackstopDefault = 30 * time.Second
	PollBackstopMin     = time.Millisecond
	PollBackstopMax     = 24 * time.Hour

	LeaseTTLDefault = 10 * time.Second
	LeaseTTLMin     = 100 * time.Millisecond
	LeaseTTLMax     = time.Hour

	AppendGroupMaxDefault = 1000
	AppendGroupMaxMin     = 1
	AppendGroupMaxMax     = 100_000

	// AppendGroupDelayMax is the longest wait; a negative delay turns
	// waiting off, so there is no minimum.
	AppendGroupDelayDefault = 200 * time.Microsecond
	AppendGroupDelayMax     = 100 * time.Millisecond

	// AppendTxTimeoutDefault bounds an application transaction on SQLite
	// (Node.AppendTx), which holds the single writer while it runs. It
	// must stay below half of the lease TTL (the lease renewals need that
	// writer): left unset, it is a quarter of ORISUN_LEASE_TTL when that
	// is shorter than the default (AppendTxTimeoutFor).
	AppendTxTimeoutDefault = 2 * time.Second
	AppendTxTimeoutMin     = time.Millisecond
	AppendTxTimeoutMax     = time.Minute

	MaxAppendEventsDefault = 10_000
	MaxAppendEventsMin     = 1
	MaxAppendEventsMax     = 100_000

	MaxAppendBytesDefault = 32 << 20
	MaxAppendBytesMin     = 1024
	MaxAppendBytesMax     = 1 << 30

	// HTTPAddrDefault is the binary's status listener. New leaves an empty
	// HTTPAddr alone: a Node embedded in Go has no listener unless asked.
	HTTPAddrDefault = "127.0.0.1:8990"

	StallThresholdDefault = 30 * time.Second
	StallThresholdMin     = 100 * time.Millisecond
	StallThresholdMax     = 24 * time.Hour

	// MetricsBoundariesMin, -1, gives no boundary metric series of its
	// own: every boundary is summed under boundary="_other".
	MetricsBoundariesDefault = 100
	MetricsBoundariesMin     = -1
	MetricsBoundariesMax     = 10_000

	// ConsolePasswordMin is the shortest console password: it guards
	// event bodies, which may hold personal data, on a listener others
	// may reach.
	ConsolePasswordMin = 8

	LogLevelDefault  = "info"
	LogFormatDefault = "text"
)

// Defaults returns the configuration orisun runs with when nothing is set:
// the binary starts from it and lets each ORISUN_* variable that is set
// replace its field. AppendTxTimeout is left zero: it follows LeaseTTL
// (AppendTxTimeoutFor), so a program that shortens the lease TTL is not
// refused for a transaction bound it never set.
func Defaults() Config {
	return Config{
		DataDir:             DataDirDefault,
		Backend:             BackendDefault,
		PGMaxConns:          PGMaxConnsDefault,
		Boundaries:          []string{BoundaryDefault},
		SQLiteSynchronous:   SQLiteSynchronousDefault,
		NATSHost:            NATSHostDefault,
		NATSPort:            NATSPortDefault,
		NATSClusterHost:     NATSClusterHostDefault,
		NATSClusterPort:     NATSClusterPortDefault,
		NATSMaxPayload:      NATSMaxPayloadDefault,
		EventStreamMaxBytes: EventStreamMaxBytesDefault,
		EventStreamMaxMsgs:  EventStreamMaxMsgsDefault,
		EventStreamMaxAge:   EventStreamMaxAgeDefault,
		StreamReplicas:      StreamReplicasDefault,
		PublishBatch:        PublishBatchDefault,
		PublishWindow:       PublishWindowDefault,
		PollInterval:        PollIntervalDefault,
		PollBackstop:        PollBackstopDefault,
		LeaseTTL:            LeaseTTLDefault,
		AppendGroupMax:      AppendGroupMaxDefault,
		AppendGroupDelay:    AppendGroupDelayDefault,
		MaxAppendEvents:     MaxAppendEventsDefault,
		MaxAppendBytes:      MaxAppendBytesDefault,
		HTTPAddr:            HTTPAddrDefault,
		StallThreshold:      StallThresholdDefault,
		MetricsBoundaries:   MetricsBoundariesDefault,
		LogLevel:            LogLevelDefault,
		LogFormat:           LogFormatDefault,
	}
}

// withDefaults fills zero fields with the defaults, except HTTPAddr and
// EventStreamMaxMsgs, whose zero means something (see the constants).
func (c Config) withDefaults() Config {
	c.DataDir = cmp.Or(c.DataDir, DataDirDefault)
	c.Backend = cmp.Or(c.Backend, BackendDefault)
	c.PGMaxConns = cmp.Or(c.PGMaxConns, PGMaxConnsDefault)
	if c.Boundaries == nil {
		c.Boundaries = []string{BoundaryDefault}
	}
	c.SQLiteSynchronous = cmp.Or(c.SQLiteSynchronous, SQLiteSynchronousDefault)
	c.NATSHost = cmp.Or(c.NATSHost, NATSHostDefault)
	c.NATSPort = cmp.Or(c.NATSPort, NATSPortDefault)
	c.NATSClusterHost = cmp.Or(c.NATSClusterHost, NATSClusterHostDefault)
	c.NATSClusterPort = cmp.Or(c.NATSClusterPort, NATSClusterPortDefault)
	c.NATSMaxPayload = cmp.Or(c.NATSMaxPayload, NATSMaxPayloadDefault)
	c.EventStreamMaxBytes = cmp.Or(c.EventStreamMaxBytes, EventStreamMaxBytesDefault)
	c.EventStreamMaxAge = cmp.Or(c.EventStreamMaxAge, EventStreamMaxAgeDefault)
	c.StreamReplicas = cmp.Or(c.StreamReplicas, StreamReplicasDefault)
	c.PublishBatch = cmp.Or(c.PublishBatch, PublishBatchDefault)
	c.PublishWindow = cmp.Or(c.PublishWindow, PublishWindowDefault)
	c.PollInterval = cmp.Or(c.PollInterval, PollIntervalDefault)
	c.PollBackstop = cmp.Or(c.PollBackstop, PollBackstopDefault)
	c.LeaseTTL = cmp.Or(c.LeaseTTL, LeaseTTLDefault)
	c.AppendGroupMax = cmp.Or(c.AppendGroupMax, AppendGroupMaxDefault)
	c.AppendGroupDelay = cmp.Or(c.AppendGroupDelay, AppendGroupDelayDefault)
	c.AppendTxTimeout = cmp.Or(c.AppendTxTimeout, AppendTxTimeoutFor(c.LeaseTTL))
	c.MaxAppendEvents = cmp.Or(c.MaxAppendEvents, MaxAppendEventsDefault)
	c.MaxAppendBytes = cmp.Or(c.MaxAppendBytes, MaxAppendBytesDefault)
	c.StallThreshold = cmp.Or(c.StallThreshold, StallThresholdDefault)
	c.MetricsBoundaries = cmp.Or(c.MetricsBoundaries, MetricsBoundariesDefault)
	c.LogLevel = cmp.Or(c.LogLevel, LogLevelDefault)
	c.LogFormat = cmp.Or(c.LogFormat, LogFormatDefault)
	return c
}

// limitText writes a limit as the variables take it: 1h, not 1h0m0s.
func limitText[T int | int32 | int64 | time.Duration](v T) string {
	d, ok := any(v).(time.Duration)
	if !ok {
		return strconv.FormatInt(int64(v), 10)
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// AppendTxTimeoutFor is AppendTxTimeout's default for a lease TTL:
// AppendTxTimeoutDefault, or a quarter of the TTL when that is shorter
// (the transaction must end well within half the TTL).
func AppendTxTimeoutFor(leaseTTL time.Duration) time.Duration {
	return max(min(AppendTxTimeoutDefault, leaseTTL/4), AppendTxTimeoutMin)
}
