package orisun

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/natsembed"
)

// Config configures a Node. cmd/orisun fills it from ORISUN_* environment
// variables (the envconfig tags name them, without the prefix); library
// users fill it in Go. Zero values take the defaults of Defaults.
type Config struct {
	// DataDir holds the SQLite database and JetStream's store directory.
	DataDir string `envconfig:"DATA_DIR" default:"./data"`
	// Backend is the store: sqlite or postgres.
	Backend string `envconfig:"BACKEND" default:"sqlite"`
	// PGURL is the PostgreSQL connection URL (backend postgres).
	PGURL string `envconfig:"PG_URL"`
	// PGMaxConns is the most connections of the PostgreSQL pool (the
	// LISTEN connection comes on top).
	PGMaxConns int32 `envconfig:"PG_MAX_CONNS" default:"8"`
	// Boundaries are created at start-up (comma-separated in the environment).
	Boundaries []string `envconfig:"BOUNDARIES" default:"default"`
	// NodeID names this node as a lease holder (and, in an embedded NATS
	// cluster, as the NATS server and JetStream peer). When empty, New
	// uses the id kept in DataDir/node-id, generating it once (host name
	// plus a random suffix), so a restarted node keeps its name.
	NodeID string `envconfig:"NODE_ID"`

	// SQLiteSynchronous is SQLite's synchronous pragma: OFF, NORMAL, FULL
	// or EXTRA. FULL (the default) makes every acknowledged append durable
	// across a power loss.
	SQLiteSynchronous string `envconfig:"SQLITE_SYNCHRONOUS" default:"FULL"`

	// NATSHost and NATSPort are where the embedded NATS server listens.
	NATSHost string `envconfig:"NATS_HOST" default:"127.0.0.1"`
	NATSPort int    `envconfig:"NATS_PORT" default:"4222"`
	// NATSUser and NATSPassword, or NATSToken, turn on authentication of
	// NATS clients: application clients then need them, and may use the API
	// and read the event streams but never write into them (see README,
	// "Access control"). orisun's own in-process connection has an internal
	// user of its own. Empty: no authentication (keep NATSHost on loopback).
	NATSUser     string `envconfig:"NATS_USER"`
	NATSPassword string `envconfig:"NATS_PASSWORD"`
	NATSToken    string `envconfig:"NATS_TOKEN"`
	// NATSTLSCert and NATSTLSKey (PEM files) turn on TLS for NATS clients
	// over TCP; NATSTLSCA (a PEM file) additionally requires client
	// certificates signed by that CA.
	NATSTLSCert string `envconfig:"NATS_TLS_CERT"`
	NATSTLSKey  string `envconfig:"NATS_TLS_KEY"`
	NATSTLSCA   string `envconfig:"NATS_TLS_CA"`
	// NATSURL, when set, is an existing NATS deployment (comma-separated
	// URLs of its servers): orisun starts no server of its own and creates
	// and checks its streams there. It logs in with NATSCreds (a
	// credentials file), or with NATSUser and NATSPassword, or NATSToken;
	// NATSTLSCA verifies the servers' certificates and NATSTLSCert and
	// NATSTLSKey are its client certificate.
	NATSURL   string `envconfig:"NATS_URL"`
	NATSCreds string `envconfig:"NATS_CREDS"`

	// NATSClusterName, when set, joins the embedded servers of several
	// nodes into one NATS cluster with clustered JetStream (PostgreSQL
	// only). The servers listen for routes on NATSClusterHost and
	// NATSClusterPort and connect to NATSClusterRoutes
	// (nats-route://host:port, comma-separated; this node's own may be in
	// the list). NATSClusterUser and NATSClusterPassword authenticate
	// routes; NATSClusterTLSCert, Key and CA turn on TLS between servers.
	NATSClusterName     string   `envconfig:"NATS_CLUSTER_NAME"`
	NATSClusterHost     string   `envconfig:"NATS_CLUSTER_HOST" default:"127.0.0.1"`
	NATSClusterPort     int      `envconfig:"NATS_CLUSTER_PORT" default:"6222"`
	NATSClusterRoutes   []string `envconfig:"NATS_CLUSTER_ROUTES"`
	NATSClusterUser     string   `envconfig:"NATS_CLUSTER_USER"`
	NATSClusterPassword string   `envconfig:"NATS_CLUSTER_PASSWORD"`
	NATSClusterTLSCert  string   `envconfig:"NATS_CLUSTER_TLS_CERT"`
	NATSClusterTLSKey   string   `envconfig:"NATS_CLUSTER_TLS_KEY"`
	NATSClusterTLSCA    string   `envconfig:"NATS_CLUSTER_TLS_CA"`

	// NATSMaxPayload is the largest NATS message; it bounds one event.
	NATSMaxPayload int32 `envconfig:"NATS_MAX_PAYLOAD" default:"1048576"`
	// EventStreamMaxBytes, MaxMsgs and MaxAge bound each boundary's memory
	// stream. A negative value (-1, -1s) means unlimited; zero MaxBytes or
	// MaxAge takes the default; zero MaxMsgs is unlimited. Old messages are discarded; they stay
	// readable from the store.
	EventStreamMaxBytes int64         `envconfig:"NATS_EVENT_STREAM_MAX_BYTES" default:"536870912"`
	EventStreamMaxMsgs  int64         `envconfig:"NATS_EVENT_STREAM_MAX_MSGS" default:"-1"`
	EventStreamMaxAge   time.Duration `envconfig:"NATS_EVENT_STREAM_MAX_AGE" default:"5m"`
	// StreamReplicas is the replica count of event streams: 1, 3 or 5;
	// more than 1 needs a shared NATS (NATSClusterName or NATSURL) with at
	// least that many JetStream servers.
	StreamReplicas int `envconfig:"NATS_STREAM_REPLICAS" default:"1"`
	// DisableMsgID leaves out the Nats-Msg-Id header (the event id) that
	// lets NATS-side tools de-duplicate; the header and the server's
	// de-duplication window cost publish throughput (see README).
	DisableMsgID bool `envconfig:"NATS_DISABLE_MSG_ID" default:"false"`

	// PublishBatch is the most events the publisher reads and publishes per
	// batch (and per checkpoint write).
	PublishBatch int `envconfig:"PUBLISH_BATCH" default:"1000"`
	// PublishWindow is the most publishes in flight at once.
	PublishWindow int `envconfig:"PUBLISH_WINDOW" default:"256"`
	// PollInterval is how often the node reads the head of every boundary
	// in one statement and wakes the publishers whose boundary has events
	// they have not read: the longest an event whose wake-up was lost (a
	// PostgreSQL notification from another node dropped with its
	// connection) waits before it is published. It is also the cadence of
	// PostgreSQL's head-row probe (see publisher.Config.ProbeInterval).
	PollInterval time.Duration `envconfig:"POLL_INTERVAL" default:"1s"`
	// PollBackstop is the longest an idle publisher waits before it reads
	// its boundary itself, in case the shared read above fails to wake it.
	// Each idle boundary costs one read per PollBackstop.
	PollBackstop time.Duration `envconfig:"POLL_BACKSTOP" default:"30s"`
	// LeaseTTL is how long a boundary's lease lasts without renewal.
	LeaseTTL time.Duration `envconfig:"LEASE_TTL" default:"10s"`

	// AppendGroupMax is the most events one group commit transaction holds.
	AppendGroupMax int `envconfig:"APPEND_GROUP_MAX" default:"1000"`
	// AppendGroupDelay is the longest a group commit waits for more appends
	// to join before it begins. It stops waiting as soon as as many appends
	// wait as its boundary's last group held (their callers usually come
	// back at once), so a lone caller never waits. Zero takes the default
	// (200µs); a negative value (-1s) turns waiting off.
	AppendGroupDelay time.Duration `envconfig:"APPEND_GROUP_DELAY" default:"200us"`
	// MaxAppendEvents and MaxAppendBytes bound one append request.
	MaxAppendEvents int `envconfig:"MAX_APPEND_EVENTS" default:"10000"`
	MaxAppendBytes  int `envconfig:"MAX_APPEND_BYTES" default:"33554432"`

	// HTTPAddr is where the status listener (/status, /healthz, /readyz,
	// /metrics) listens, host:port. Empty or "off" turns it off. The
	// binary's default is loopback; a Node embedded in Go gets no listener
	// unless this is set (withDefaults leaves it alone), so that programs
	// and tests embedding several nodes do not fight over one port.
	HTTPAddr string `envconfig:"HTTP_ADDR" default:"127.0.0.1:8990"`
	// StallThreshold is how long a publisher may stay stalled before
	// /readyz reports the node not ready.
	StallThreshold time.Duration `envconfig:"STALL_THRESHOLD" default:"30s"`

	// LogLevel is debug, info, warn or error; LogFormat text or json.
	LogLevel  string `envconfig:"LOG_LEVEL" default:"info"`
	LogFormat string `envconfig:"LOG_FORMAT" default:"text"`
}

// Defaults returns the configuration orisun runs with when nothing is set.
func Defaults() Config {
	return Config{
		DataDir:             "./data",
		Backend:             "sqlite",
		PGMaxConns:          8,
		Boundaries:          []string{"default"},
		SQLiteSynchronous:   "FULL",
		NATSHost:            "127.0.0.1",
		NATSPort:            4222,
		NATSClusterHost:     "127.0.0.1",
		NATSClusterPort:     6222,
		NATSMaxPayload:      1 << 20,
		EventStreamMaxBytes: 512 << 20,
		EventStreamMaxMsgs:  -1,
		EventStreamMaxAge:   5 * time.Minute,
		StreamReplicas:      1,
		PublishBatch:        1000,
		PublishWindow:       256,
		PollInterval:        time.Second,
		PollBackstop:        30 * time.Second,
		LeaseTTL:            10 * time.Second,
		AppendGroupMax:      1000,
		AppendGroupDelay:    200 * time.Microsecond,
		MaxAppendEvents:     10000,
		MaxAppendBytes:      32 << 20,
		HTTPAddr:            "127.0.0.1:8990",
		StallThreshold:      30 * time.Second,
		LogLevel:            "info",
		LogFormat:           "text",
	}
}

// withDefaults fills zero fields with the defaults.
func (c Config) withDefaults() Config {
	d := Defaults()
	if c.DataDir == "" {
		c.DataDir = d.DataDir
	}
	if c.Backend == "" {
		c.Backend = d.Backend
	}
	if c.PGMaxConns == 0 {
		c.PGMaxConns = d.PGMaxConns
	}
	if c.Boundaries == nil {
		c.Boundaries = d.Boundaries
	}
	if c.SQLiteSynchronous == "" {
		c.SQLiteSynchronous = d.SQLiteSynchronous
	}
	if c.NATSHost == "" {
		c.NATSHost = d.NATSHost
	}
	if c.NATSPort == 0 {
		c.NATSPort = d.NATSPort
	}
	if c.NATSClusterHost == "" {
		c.NATSClusterHost = d.NATSClusterHost
	}
	if c.NATSClusterPort == 0 {
		c.NATSClusterPort = d.NATSClusterPort
	}
	if c.NATSMaxPayload == 0 {
		c.NATSMaxPayload = d.NATSMaxPayload
	}
	if c.EventStreamMaxBytes == 0 {
		c.EventStreamMaxBytes = d.EventStreamMaxBytes
	}
	if c.EventStreamMaxAge == 0 {
		c.EventStreamMaxAge = d.EventStreamMaxAge
	}
	if c.StreamReplicas == 0 {
		c.StreamReplicas = d.StreamReplicas
	}
	if c.PublishBatch == 0 {
		c.PublishBatch = d.PublishBatch
	}
	if c.PublishWindow == 0 {
		c.PublishWindow = d.PublishWindow
	}
	if c.PollInterval == 0 {
		c.PollInterval = d.PollInterval
	}
	if c.PollBackstop == 0 {
		c.PollBackstop = d.PollBackstop
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = d.LeaseTTL
	}
	if c.AppendGroupMax == 0 {
		c.AppendGroupMax = d.AppendGroupMax
	}
	if c.AppendGroupDelay == 0 {
		c.AppendGroupDelay = d.AppendGroupDelay
	}
	if c.MaxAppendEvents == 0 {
		c.MaxAppendEvents = d.MaxAppendEvents
	}
	if c.MaxAppendBytes == 0 {
		c.MaxAppendBytes = d.MaxAppendBytes
	}
	if c.StallThreshold == 0 {
		c.StallThreshold = d.StallThreshold
	}
	if c.LogLevel == "" {
		c.LogLevel = d.LogLevel
	}
	if c.LogFormat == "" {
		c.LogFormat = d.LogFormat
	}
	return c
}

// Validate checks the configuration; each error names the environment
// variable, the limit and the value.
func (c Config) Validate() error {
	var errs []error
	bad := func(variable, format string, args ...any) {
		errs = append(errs, fmt.Errorf("ORISUN_%s: "+format, append([]any{variable}, args...)...))
	}
	switch c.Backend {
	case "sqlite":
		// SQLite is one process per data directory: a cluster of nodes
		// would each have a store of their own under one set of streams.
		if c.NATSClusterName != "" {
			bad("NATS_CLUSTER_NAME", "%q: a NATS cluster of orisun nodes needs ORISUN_BACKEND=postgres; SQLite stays single-node "+
				"(one process owns the data directory). Leave ORISUN_NATS_CLUSTER_NAME empty, or move the store to PostgreSQL", c.NATSClusterName)
		}
		if len(c.NATSClusterRoutes) > 0 {
			bad("NATS_CLUSTER_ROUTES", "a NATS cluster of orisun nodes needs ORISUN_BACKEND=postgres; SQLite stays single-node")
		}
		if c.StreamReplicas > 1 {
			bad("NATS_STREAM_REPLICAS", "%d: replicated streams are for a cluster of orisun nodes on PostgreSQL; SQLite stays single-node", c.StreamReplicas)
		}
	case "postgres":
		if c.PGURL == "" {
			bad("PG_URL", "is required with ORISUN_BACKEND=postgres (e.g. postgres://user:pass@host:5432/db)")
		} else if err := checkPGURL(c.PGURL); err != "" {
			bad("PG_URL", "%s", err)
		}
		if c.PGMaxConns < 2 || c.PGMaxConns > 1000 {
			bad("PG_MAX_CONNS", "%d is outside 2–1000", c.PGMaxConns)
		}
	default:
		bad("BACKEND", "%q is not a backend; use sqlite or postgres", c.Backend)
	}
	if len(c.Boundaries) == 0 {
		bad("BOUNDARIES", "at least one boundary is required")
	}
	for _, b := range c.Boundaries {
		if err := event.ValidateBoundaryName(b); err != nil {
			bad("BOUNDARIES", "%v", err)
		}
	}
	switch strings.ToUpper(c.SQLiteSynchronous) {
	case "OFF", "NORMAL", "FULL", "EXTRA":
	default:
		bad("SQLITE_SYNCHRONOUS", "%q is not one of OFF, NORMAL, FULL, EXTRA", c.SQLiteSynchronous)
	}
	if c.NATSPort < -1 || c.NATSPort > 65535 {
		bad("NATS_PORT", "%d is not a port (1–65535, or -1 for a random one)", c.NATSPort)
	}
	c.validateNATSAccess(bad)
	if c.NATSMaxPayload < 1024 || c.NATSMaxPayload > 64<<20 {
		bad("NATS_MAX_PAYLOAD", "%d is outside 1024–67108864 bytes", c.NATSMaxPayload)
	}
	c.validateNATSCluster(bad)
	switch {
	case c.StreamReplicas != 1 && c.StreamReplicas != 3 && c.StreamReplicas != 5:
		bad("NATS_STREAM_REPLICAS", "%d is not 1, 3 or 5", c.StreamReplicas)
	case c.StreamReplicas > 1 && !c.SharedNATS():
		bad("NATS_STREAM_REPLICAS", "%d: only 1 is possible with a single embedded server; set ORISUN_NATS_CLUSTER_NAME "+
			"(embedded cluster) or ORISUN_NATS_URL (an existing NATS cluster)", c.StreamReplicas)
	}
	if c.PublishBatch < 1 || c.PublishBatch > 100000 {
		bad("PUBLISH_BATCH", "%d is outside 1–100000", c.PublishBatch)
	}
	if c.PublishWindow < 1 || c.PublishWindow > 65536 {
		bad("PUBLISH_WINDOW", "%d is outside 1–65536", c.PublishWindow)
	}
	if c.PollInterval < time.Millisecond || c.PollInterval > time.Hour {
		bad("POLL_INTERVAL", "%s is outside 1ms–1h", c.PollInterval)
	}
	if c.PollBackstop < time.Millisecond || c.PollBackstop > 24*time.Hour {
		bad("POLL_BACKSTOP", "%s is outside 1ms–24h", c.PollBackstop)
	}
	if c.LeaseTTL < 100*time.Millisecond || c.LeaseTTL > time.Hour {
		bad("LEASE_TTL", "%s is outside 100ms–1h", c.LeaseTTL)
	}
	if c.AppendGroupMax < 1 || c.AppendGroupMax > 100000 {
		bad("APPEND_GROUP_MAX", "%d is outside 1–100000", c.AppendGroupMax)
	}
	if c.AppendGroupDelay > 100*time.Millisecond {
		bad("APPEND_GROUP_DELAY", "%s is above 100ms (a negative value turns the wait off)", c.AppendGroupDelay)
	}
	if c.MaxAppendEvents < 1 || c.MaxAppendEvents > 100000 {
		bad("MAX_APPEND_EVENTS", "%d is outside 1–100000", c.MaxAppendEvents)
	}
	if c.MaxAppendBytes < 1024 || c.MaxAppendBytes > 1<<30 {
		bad("MAX_APPEND_BYTES", "%d is outside 1024–1073741824", c.MaxAppendBytes)
	}
	if c.HTTPEnabled() {
		host, port, err := net.SplitHostPort(c.HTTPAddr)
		if p, perr := strconv.Atoi(port); err != nil || perr != nil || p < 0 || p > 65535 {
			bad("HTTP_ADDR", "%q is not host:port (e.g. 127.0.0.1:8990, :8990 for every interface, or off)", c.HTTPAddr)
		} else if host != "" && net.ParseIP(host) == nil && strings.ContainsAny(host, " /") {
			bad("HTTP_ADDR", "%q: %q is not a host name or address", c.HTTPAddr, host)
		}
	}
	if c.StallThreshold < 100*time.Millisecond || c.StallThreshold > 24*time.Hour {
		bad("STALL_THRESHOLD", "%s is outside 100ms–24h", c.StallThreshold)
	}
	switch strings.ToLower(c.LogLevel) {
	case "debug", "info", "warn", "error":
	default:
		bad("LOG_LEVEL", "%q is not one of debug, info, warn, error", c.LogLevel)
	}
	switch strings.ToLower(c.LogFormat) {
	case "text", "json":
	default:
		bad("LOG_FORMAT", "%q is not one of text, json", c.LogFormat)
	}
	return errors.Join(errs...)
}

// SharedNATS reports whether the event streams live in a NATS that other
// orisun nodes use too (an embedded cluster or an external deployment):
// then a boundary's stream is fed by whichever node leads it.
func (c Config) SharedNATS() bool {
	return c.NATSClusterName != "" || c.NATSURL != ""
}

// Placement reports whether nodes spread the boundaries' leases among
// themselves: only several nodes on one PostgreSQL database sharing one
// NATS can. A SQLite node is alone with its store, even on an external
// NATS, and must lead all of its boundaries.
func (c Config) Placement() bool {
	return c.SharedNATS() && c.Backend == "postgres"
}

// validateNATSCluster checks the cluster and external NATS variables.
func (c Config) validateNATSCluster(bad func(variable, format string, args ...any)) {
	if c.NATSURL != "" {
		if c.NATSClusterName != "" {
			bad("NATS_CLUSTER_NAME", "cannot be combined with ORISUN_NATS_URL: with an external NATS orisun starts no server; "+
				"set one or the other")
		}
		for _, u := range strings.Split(c.NATSURL, ",") {
			pu, err := url.Parse(strings.TrimSpace(u))
			if err != nil || pu.Host == "" || (pu.Scheme != "nats" && pu.Scheme != "tls" && pu.Scheme != "ws" && pu.Scheme != "wss") {
				bad("NATS_URL", "%q is not a NATS URL (e.g. nats://nats1:4222,nats://nats2:4222)", u)
			}
		}
	}
	if c.NATSCreds != "" {
		if c.NATSURL == "" {
			bad("NATS_CREDS", "is the credentials file for ORISUN_NATS_URL, which is not set")
		} else if c.NATSUser != "" || c.NATSToken != "" {
			bad("NATS_CREDS", "cannot be combined with ORISUN_NATS_USER or ORISUN_NATS_TOKEN; use one way to log in")
		} else {
			readable(bad, "NATS_CREDS", c.NATSCreds)
		}
	}
	if c.NATSClusterName == "" {
		// Every cluster variable means nothing without a cluster: refuse
		// it rather than ignore it. Host and port are refused only when
		// they differ from their defaults (an unset variable reads as its
		// default; a Config built in Go may leave them zero).
		d := Defaults()
		port := ""
		if c.NATSClusterPort != 0 && c.NATSClusterPort != d.NATSClusterPort {
			port = strconv.Itoa(c.NATSClusterPort)
		}
		host := ""
		if c.NATSClusterHost != "" && c.NATSClusterHost != d.NATSClusterHost {
			host = c.NATSClusterHost
		}
		for _, v := range []struct{ name, value string }{
			{"NATS_CLUSTER_ROUTES", strings.Join(c.NATSClusterRoutes, ",")},
			{"NATS_CLUSTER_HOST", host},
			{"NATS_CLUSTER_PORT", port},
			{"NATS_CLUSTER_USER", c.NATSClusterUser},
			{"NATS_CLUSTER_PASSWORD", c.NATSClusterPassword},
			{"NATS_CLUSTER_TLS_CERT", c.NATSClusterTLSCert},
			{"NATS_CLUSTER_TLS_KEY", c.NATSClusterTLSKey},
			{"NATS_CLUSTER_TLS_CA", c.NATSClusterTLSCA},
		} {
			if v.value != "" {
				bad(v.name, "is set but ORISUN_NATS_CLUSTER_NAME is not: name the cluster to join the embedded servers")
			}
		}
		return
	}
	if strings.ContainsAny(c.NATSClusterName, " \t.*>") {
		bad("NATS_CLUSTER_NAME", "%q: use letters, digits, - and _ only", c.NATSClusterName)
	}
	if c.NATSClusterPort < -1 || c.NATSClusterPort > 65535 {
		bad("NATS_CLUSTER_PORT", "%d is not a port (1–65535, or -1 for a random one)", c.NATSClusterPort)
	}
	for _, r := range c.NATSClusterRoutes {
		u, err := url.Parse(strings.TrimSpace(r))
		if err != nil || u.Host == "" || u.Port() == "" || (u.Scheme != "nats-route" && u.Scheme != "nats" && u.Scheme != "tls") {
			bad("NATS_CLUSTER_ROUTES", "%q is not a route URL (e.g. nats-route://orisun2:6222)", r)
		}
	}
	switch {
	case c.NATSClusterUser != "" && c.NATSClusterPassword == "":
		bad("NATS_CLUSTER_PASSWORD", "is required with ORISUN_NATS_CLUSTER_USER (%q)", c.NATSClusterUser)
	case c.NATSClusterPassword != "" && c.NATSClusterUser == "":
		bad("NATS_CLUSTER_USER", "is required with ORISUN_NATS_CLUSTER_PASSWORD")
	}
	switch {
	case (c.NATSClusterTLSCert == "") != (c.NATSClusterTLSKey == ""):
		bad("NATS_CLUSTER_TLS_KEY", "ORISUN_NATS_CLUSTER_TLS_CERT and ORISUN_NATS_CLUSTER_TLS_KEY go together")
	case c.NATSClusterTLSCA != "" && c.NATSClusterTLSCert == "":
		bad("NATS_CLUSTER_TLS_CA", "needs ORISUN_NATS_CLUSTER_TLS_CERT and ORISUN_NATS_CLUSTER_TLS_KEY")
	case c.NATSClusterTLSCert != "":
		if readable(bad, "NATS_CLUSTER_TLS_CERT", c.NATSClusterTLSCert) && readable(bad, "NATS_CLUSTER_TLS_KEY", c.NATSClusterTLSKey) {
			if _, err := tls.LoadX509KeyPair(c.NATSClusterTLSCert, c.NATSClusterTLSKey); err != nil {
				bad("NATS_CLUSTER_TLS_CERT", "certificate %s and key %s do not load as a pair: %v", c.NATSClusterTLSCert, c.NATSClusterTLSKey, err)
			}
		}
		if c.NATSClusterTLSCA != "" {
			readable(bad, "NATS_CLUSTER_TLS_CA", c.NATSClusterTLSCA)
		}
	}
}

// natsCluster turns the configuration into the embedded server's cluster
// settings (nil when not clustered).
func (c Config) natsCluster() *natsembed.Cluster {
	if c.NATSClusterName == "" {
		return nil
	}
	cl := &natsembed.Cluster{
		Name:     c.NATSClusterName,
		Host:     c.NATSClusterHost,
		Port:     c.NATSClusterPort,
		Routes:   c.NATSClusterRoutes,
		User:     c.NATSClusterUser,
		Password: c.NATSClusterPassword,
	}
	if c.NATSClusterTLSCert != "" {
		cl.TLS = &natsembed.TLS{CertFile: c.NATSClusterTLSCert, KeyFile: c.NATSClusterTLSKey, CAFile: c.NATSClusterTLSCA}
	}
	return cl
}

// HTTPEnabled reports whether the status listener is on.
func (c Config) HTTPEnabled() bool {
	return c.HTTPAddr != "" && !strings.EqualFold(c.HTTPAddr, "off")
}

// validateNATSAccess checks the authentication and TLS variables: which
// go together, which exclude each other, and that the files are readable
// and hold what they should.
func (c Config) validateNATSAccess(bad func(variable, format string, args ...any)) {
	switch {
	case c.NATSToken != "" && (c.NATSUser != "" || c.NATSPassword != ""):
		bad("NATS_TOKEN", "cannot be combined with ORISUN_NATS_USER/ORISUN_NATS_PASSWORD; set a token or a user and password, not both")
	case c.NATSUser != "" && c.NATSPassword == "":
		bad("NATS_PASSWORD", "is required with ORISUN_NATS_USER (%q)", c.NATSUser)
	case c.NATSPassword != "" && c.NATSUser == "":
		bad("NATS_USER", "is required with ORISUN_NATS_PASSWORD")
	case c.NATSUser == natsembed.InternalUser:
		bad("NATS_USER", "%q is reserved for orisun's own connections; choose another name", c.NATSUser)
	}
	switch {
	case c.NATSTLSCert != "" && c.NATSTLSKey == "":
		bad("NATS_TLS_KEY", "is required with ORISUN_NATS_TLS_CERT (%s)", c.NATSTLSCert)
	case c.NATSTLSKey != "" && c.NATSTLSCert == "":
		bad("NATS_TLS_CERT", "is required with ORISUN_NATS_TLS_KEY (%s)", c.NATSTLSKey)
	case c.NATSTLSCA != "" && c.NATSTLSCert == "" && c.NATSURL != "":
		// External NATS: the CA verifies the servers; no client certificate.
		if readable(bad, "NATS_TLS_CA", c.NATSTLSCA) {
			pem, _ := os.ReadFile(c.NATSTLSCA)
			if !x509.NewCertPool().AppendCertsFromPEM(pem) {
				bad("NATS_TLS_CA", "%s holds no PEM certificate", c.NATSTLSCA)
			}
		}
	case c.NATSTLSCA != "" && c.NATSTLSCert == "":
		bad("NATS_TLS_CA", "needs ORISUN_NATS_TLS_CERT and ORISUN_NATS_TLS_KEY: client certificates are verified only over TLS")
	case c.NATSTLSCert != "":
		certOK := readable(bad, "NATS_TLS_CERT", c.NATSTLSCert)
		keyOK := readable(bad, "NATS_TLS_KEY", c.NATSTLSKey)
		if certOK && keyOK {
			if _, err := tls.LoadX509KeyPair(c.NATSTLSCert, c.NATSTLSKey); err != nil {
				bad("NATS_TLS_CERT", "certificate %s and key %s (ORISUN_NATS_TLS_KEY) do not load as a pair: %v", c.NATSTLSCert, c.NATSTLSKey, err)
			}
		}
		if c.NATSTLSCA != "" && readable(bad, "NATS_TLS_CA", c.NATSTLSCA) {
			pem, _ := os.ReadFile(c.NATSTLSCA)
			if !x509.NewCertPool().AppendCertsFromPEM(pem) {
				bad("NATS_TLS_CA", "%s holds no PEM certificate", c.NATSTLSCA)
			}
		}
	}
}

// readable reports whether a file can be read, and names the variable when
// it cannot.
func readable(bad func(variable, format string, args ...any), variable, path string) bool {
	f, err := os.Open(path)
	if err != nil {
		bad(variable, "cannot read %s: %v", path, err)
		return false
	}
	f.Close()
	return true
}

// natsAccess turns the configuration into the embedded server's
// authentication and TLS settings (nil when off).
func (c Config) natsAccess() (*natsembed.Auth, *natsembed.TLS) {
	var auth *natsembed.Auth
	if c.NATSUser != "" || c.NATSToken != "" {
		auth = &natsembed.Auth{User: c.NATSUser, Password: c.NATSPassword, Token: c.NATSToken}
	}
	var t *natsembed.TLS
	if c.NATSTLSCert != "" {
		t = &natsembed.TLS{CertFile: c.NATSTLSCert, KeyFile: c.NATSTLSKey, CAFile: c.NATSTLSCA}
	}
	return auth, t
}

// checkPGURL says what is wrong with ORISUN_PG_URL ("" when nothing is),
// never repeating the URL: it may hold a password. It parses the URL as
// the store will, so a typo stops start-up with the variable's name
// instead of surfacing later as an anonymous "URL" error of the store.
func checkPGURL(raw string) string {
	if _, err := pgxpool.ParseConfig(raw); err != nil {
		return "is not a valid PostgreSQL connection string; use postgres://user:password@host:5432/database?sslmode=… " +
			"or keyword=value pairs (the value is not repeated here: it may hold a password)"
	}
	// The store's pool size is ORISUN_PG_MAX_CONNS, which always has a
	// value (8 by default) and overrides the URL's pool_max_conns: a
	// setting that would be ignored in silence is refused instead.
	if cc, err := pgconn.ParseConfig(raw); err == nil && cc.RuntimeParams["pool_max_conns"] != "" {
		return "sets pool_max_conns, which orisun does not use; remove it and set ORISUN_PG_MAX_CONNS instead"
	}
	return ""
}
