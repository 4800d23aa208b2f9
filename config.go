package orisun

import (
	"cmp"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/orisun-io/orisun/natsembed"
	"github.com/orisun-io/orisun/status/statushttp"
)

// Config configures a Node. cmd/orisun starts from Defaults and lets each
// ORISUN_* environment variable that is set replace its field (the
// envconfig tags name them, without the prefix); library users fill it in
// Go. Zero values take the defaults (the XDefault constants), except where
// a field says otherwise. Validate enforces the XMin and XMax constants.
type Config struct {
	// DataDir holds the SQLite database and JetStream's store directory.
	DataDir string `envconfig:"DATA_DIR"`
	// Backend is the store: sqlite or postgres.
	Backend string `envconfig:"BACKEND"`
	// PGURL is the PostgreSQL connection URL (backend postgres).
	PGURL string `envconfig:"PG_URL"`
	// PGMaxConns is the most connections of the PostgreSQL pool (the
	// LISTEN connection comes on top).
	PGMaxConns int32 `envconfig:"PG_MAX_CONNS"`
	// Boundaries are created at start-up (comma-separated in the environment).
	Boundaries []string `envconfig:"BOUNDARIES"`
	// NodeID names this node as a lease holder (and, in an embedded NATS
	// cluster, as the NATS server and JetStream peer). When empty, New
	// uses the id kept in DataDir/node-id, generating it once (host name
	// plus a random suffix), so a restarted node keeps its name.
	NodeID string `envconfig:"NODE_ID"`

	// SQLiteSynchronous is SQLite's synchronous pragma: OFF, NORMAL, FULL
	// or EXTRA. FULL (the default) makes every acknowledged append durable
	// across a power loss.
	SQLiteSynchronous string `envconfig:"SQLITE_SYNCHRONOUS"`

	// NATSHost and NATSPort are where the embedded NATS server listens.
	NATSHost string `envconfig:"NATS_HOST"`
	NATSPort int    `envconfig:"NATS_PORT"`
	// NATSUser and NATSPassword, or NATSToken, turn on authentication of
	// NATS clients: application clients then need them. With or without
	// them an application client may use the API and read the event
	// streams but never write into them (see README, "Access control");
	// orisun's own in-process connections have internal users of their
	// own. Empty: clients connect without credentials, as the application
	// (keep NATSHost on loopback).
	NATSUser     string `envconfig:"NATS_USER"`
	NATSPassword string `envconfig:"NATS_PASSWORD"`
	NATSToken    string `envconfig:"NATS_TOKEN"`
	// NATSAdminUser and NATSAdminPassword, or NATSAdminToken, are the
	// admin's credentials: the application's permissions and boundary
	// creation (orisun.api.boundaries.create), which every boundary's
	// stream memory makes the admin's. Without credentials of either kind
	// every client may create boundaries; with the application's and no
	// admin's, no client may (ORISUN_BOUNDARIES and Node.CreateBoundary
	// still do). Embedded server only.
	NATSAdminUser     string `envconfig:"NATS_ADMIN_USER"`
	NATSAdminPassword string `envconfig:"NATS_ADMIN_PASSWORD"`
	NATSAdminToken    string `envconfig:"NATS_ADMIN_TOKEN"`
	// NATSSystemUser and NATSSystemPassword (both or neither) are the
	// operator's user in the embedded server's system account, for the
	// `nats server …` commands of the nats CLI (server ls, ping, info,
	// report jetstream): the server's monitoring requests, in an account
	// without the event streams, never JetStream (natsembed.SystemPermissions).
	// Neither the application's nor the admin's credentials. Embedded
	// server only. Empty: nobody is in the system account.
	NATSSystemUser     string `envconfig:"NATS_SYSTEM_USER"`
	NATSSystemPassword string `envconfig:"NATS_SYSTEM_PASSWORD"`
	// NATSMaxMemory is the embedded server's JetStream memory budget: every
	// boundary's stream reserves EventStreamMaxBytes of it, and a boundary
	// whose stream would not fit is refused when it is created. Zero
	// leaves JetStream's default, 75% of the host's memory (or of
	// GOMEMLIMIT); in a container, set it below the container's limit.
	NATSMaxMemory int64 `envconfig:"NATS_MAX_MEMORY"`
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
	NATSClusterHost     string   `envconfig:"NATS_CLUSTER_HOST"`
	NATSClusterPort     int      `envconfig:"NATS_CLUSTER_PORT"`
	NATSClusterRoutes   []string `envconfig:"NATS_CLUSTER_ROUTES"`
	NATSClusterUser     string   `envconfig:"NATS_CLUSTER_USER"`
	NATSClusterPassword string   `envconfig:"NATS_CLUSTER_PASSWORD"`
	NATSClusterTLSCert  string   `envconfig:"NATS_CLUSTER_TLS_CERT"`
	NATSClusterTLSKey   string   `envconfig:"NATS_CLUSTER_TLS_KEY"`
	NATSClusterTLSCA    string   `envconfig:"NATS_CLUSTER_TLS_CA"`

	// NATSMonitorAddr, when set, turns on the embedded NATS server's own
	// monitoring endpoint (/varz, /jsz, /connz, /healthz, …), which
	// prometheus-nats-exporter and nats-top read: host:port, or a
	// port alone. An empty host (":8222", or "8222") is loopback
	// (NATSMonitorHostDefault); "0.0.0.0:8222" listens on every
	// interface. Port 0 picks a free one (Node.NATSMonitorURL says which).
	// Empty or "off": off. It has no authentication.
	NATSMonitorAddr string `envconfig:"NATS_MONITOR_ADDR"`

	// NATSMaxPayload is the largest NATS message; it bounds one event.
	NATSMaxPayload int32 `envconfig:"NATS_MAX_PAYLOAD"`
	// EventStreamMaxBytes, MaxMsgs and MaxAge bound each boundary's memory
	// stream. A negative value (-1, -1s) means unlimited; zero MaxBytes or
	// MaxAge takes the default; zero MaxMsgs is unlimited. Old messages are discarded; they stay
	// readable from the store.
	EventStreamMaxBytes int64         `envconfig:"NATS_EVENT_STREAM_MAX_BYTES"`
	EventStreamMaxMsgs  int64         `envconfig:"NATS_EVENT_STREAM_MAX_MSGS"`
	EventStreamMaxAge   time.Duration `envconfig:"NATS_EVENT_STREAM_MAX_AGE"`
	// StreamReplicas is the replica count of event streams: 1, 3 or 5;
	// more than 1 needs a shared NATS (NATSClusterName or NATSURL) with at
	// least that many JetStream servers.
	StreamReplicas int `envconfig:"NATS_STREAM_REPLICAS"`
	// MsgID gives every message the Nats-Msg-Id header (the event id), for
	// NATS-side tools that publish or republish orisun's messages and want
	// the server to drop a second copy. Off by default: the
	// expected-last-sequence header already keeps duplicates and reordering
	// out of the stream (docs/design.md I2), and the server's
	// de-duplication map holds every id of the last two minutes in memory
	// (about 210 bytes of heap each) and costs publish throughput
	// (docs/performance.md, "Memory beyond the streams").
	MsgID bool `envconfig:"NATS_MSG_ID"`

	// PublishBatch is the most events the publisher reads and publishes per
	// batch (and per checkpoint write).
	PublishBatch int `envconfig:"PUBLISH_BATCH"`
	// PublishWindow is the most publishes in flight at once.
	PublishWindow int `envconfig:"PUBLISH_WINDOW"`
	// PollInterval is how often the node reads the head of every boundary
	// in one statement and wakes the publishers whose boundary has events
	// they have not read: the longest an event whose wake-up was lost (a
	// PostgreSQL notification from another node dropped with its
	// connection) waits before it is published. It is also the cadence of
	// PostgreSQL's head-row probe (see publisher.Config.ProbeInterval), and
	// of the node's listing of every stream, which wakes the leading
	// publishers whose stream someone changed, replaced or appended to
	// (see publisher.Publisher.StreamDrifted): they repair it within one
	// PollInterval.
	PollInterval time.Duration `envconfig:"POLL_INTERVAL"`
	// PollBackstop is the longest an idle publisher waits before it reads
	// its boundary itself, in case the shared read above fails to wake it,
	// and how often a leading publisher checks its stream itself, in case
	// the shared listing fails. Each idle boundary costs one read and one
	// stream info per PollBackstop.
	PollBackstop time.Duration `envconfig:"POLL_BACKSTOP"`
	// LeaseTTL is how long a boundary's lease lasts without renewal.
	LeaseTTL time.Duration `envconfig:"LEASE_TTL"`

	// AppendGroupMax is the most events one group commit transaction holds.
	AppendGroupMax int `envconfig:"APPEND_GROUP_MAX"`
	// AppendGroupDelay is the longest a group commit waits for more appends
	// to join before it begins. It stops waiting as soon as as many appends
	// wait as its boundary's last group held (their callers usually come
	// back at once), so a lone caller never waits. Zero takes the default
	// (AppendGroupDelayDefault); a negative value (-1s) turns waiting off.
	AppendGroupDelay time.Duration `envconfig:"APPEND_GROUP_DELAY"`
	// AppendTxTimeout bounds an application transaction on SQLite
	// (Node.AppendTx): it holds the single writer, and every other append
	// waits meanwhile; one that runs longer is rolled back. On SQLite it
	// must be below half of LeaseTTL: the transaction holds the writer's
	// only connection, which the lease renewals need. Zero takes the
	// default, or a quarter of LeaseTTL when that is shorter.
	AppendTxTimeout time.Duration `envconfig:"APPEND_TX_TIMEOUT"`
	// MaxAppendEvents and MaxAppendBytes bound one append request.
	MaxAppendEvents int `envconfig:"MAX_APPEND_EVENTS"`
	MaxAppendBytes  int `envconfig:"MAX_APPEND_BYTES"`

	// HTTPAddr is where the status listener (/status, /healthz, /readyz,
	// /metrics) listens, host:port. Empty or "off" turns it off. The
	// binary's default is loopback; a Node embedded in Go gets no listener
	// unless this is set (New leaves it alone), so that programs
	// and tests embedding several nodes do not fight over one port.
	HTTPAddr string `envconfig:"HTTP_ADDR"`
	// StallThreshold is how long a publisher may stay stalled before
	// /readyz reports the node not ready.
	StallThreshold time.Duration `envconfig:"STALL_THRESHOLD"`
	// MetricsBoundaries is the most boundaries whose metrics carry their
	// own boundary label; the series of the others are summed under
	// boundary="_other" (docs/operations.md, "Metrics"). -1 gives no
	// boundary series of its own. Zero in a Config given to New takes the
	// default (Defaults); Validate refuses it, so that the variable set to
	// 0 is refused, naming -1, rather than read as the default.
	MetricsBoundaries int `envconfig:"METRICS_BOUNDARIES"`
	// ConsoleUser and ConsolePassword (both or neither) are the console's
	// credentials (HTTP basic auth) for its pages that show events. Those
	// pages need them whenever NATS has credentials, NATS is external, or
	// the listener is not on loopback (consoleAccess); without them they
	// are then off. The overview needs none: it shows what /status shows.
	ConsoleUser     string `envconfig:"CONSOLE_USER"`
	ConsolePassword string `envconfig:"CONSOLE_PASSWORD"`

	// LogLevel is debug, info, warn or error; LogFormat text or json.
	LogLevel  string `envconfig:"LOG_LEVEL"`
	LogFormat string `envconfig:"LOG_FORMAT"`
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

// natsMonitor is the embedded server's monitoring listener, nil when off.
// The address is valid (Validate).
func (c Config) natsMonitor() *natsembed.Monitor {
	if c.NATSMonitorAddr == "" || strings.EqualFold(c.NATSMonitorAddr, "off") {
		return nil
	}
	host, port, err := monitorAddr(c.NATSMonitorAddr)
	if err != nil {
		return nil
	}
	return &natsembed.Monitor{Host: host, Port: port}
}

// monitorAddr splits ORISUN_NATS_MONITOR_ADDR: host:port or a port alone;
// an empty host is NATSMonitorHostDefault.
func monitorAddr(addr string) (host string, port int, err error) {
	if !strings.Contains(addr, ":") {
		addr = ":" + addr
	}
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err = strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("port %q is not 0–65535", p)
	}
	if strings.ContainsAny(host, " /") {
		return "", 0, fmt.Errorf("%q is not a host name or address", host)
	}
	return cmp.Or(host, NATSMonitorHostDefault), port, nil
}

// metricsBoundaries is the cap of boundary labels (none for -1).
func (c Config) metricsBoundaries() int {
	return max(c.MetricsBoundaries, 0)
}

// HTTPEnabled reports whether the status listener is on.
func (c Config) HTTPEnabled() bool {
	return c.HTTPAddr != "" && !strings.EqualFold(c.HTTPAddr, "off")
}

// consoleAccess is the rule of the console's event pages
// (docs/console.md, "Access"): event bodies may hold personal data, so the
// pages need the console's credentials whenever someone other than the
// host's own users may reach the listener, or the operator guards NATS
// (where the same events are) with credentials. NeedCredentials says why;
// empty, the pages are open, like NATS itself without credentials on
// loopback.
func (c Config) consoleAccess() statushttp.ConsoleAccess {
	a := statushttp.ConsoleAccess{User: c.ConsoleUser, Password: c.ConsolePassword}
	switch {
	case c.NATSURL != "":
		a.NeedCredentials = "NATS is external (ORISUN_NATS_URL)"
	case c.NATSUser != "" || c.NATSToken != "" || c.NATSAdminUser != "" || c.NATSAdminToken != "" ||
		c.NATSSystemUser != "" || c.NATSCreds != "":
		a.NeedCredentials = "NATS credentials are configured"
	case !loopbackAddr(c.HTTPAddr):
		a.NeedCredentials = fmt.Sprintf("the listener (ORISUN_HTTP_ADDR=%s) is not on loopback", c.HTTPAddr)
	}
	return a
}

// loopbackAddr reports whether host:port listens on loopback only: an
// empty host is every interface, a name other than localhost may be any.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// natsAdmin is the embedded server's admin principal (nil when not
// configured).
func (c Config) natsAdmin() *natsembed.Auth {
	if c.NATSAdminUser == "" && c.NATSAdminToken == "" {
		return nil
	}
	return &natsembed.Auth{User: c.NATSAdminUser, Password: c.NATSAdminPassword, Token: c.NATSAdminToken}
}

// natsSystem is the embedded server's system user (nil when not
// configured).
func (c Config) natsSystem() *natsembed.Auth {
	if c.NATSSystemUser == "" {
		return nil
	}
	return &natsembed.Auth{User: c.NATSSystemUser, Password: c.NATSSystemPassword}
}

// natsAccess turns the configuration into the embedded server's
// authentication and TLS settings (nil when not configured; the permission
// model is on either way).
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
