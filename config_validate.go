package orisun

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/natsembed"
)

// Validate checks the configuration; each error names the environment
// variable, the limit and the value. It checks one concern after the
// other and reports every problem it finds, in that order.
func (c Config) Validate() error {
	var p problems
	c.validateStore(&p)
	c.validateNATS(&p)
	c.validatePublisher(&p)
	c.validateAppends(&p)
	c.validateStatus(&p)
	c.validateConsole(&p)
	c.validateLogs(&p)
	return errors.Join(p...)
}

// problems collects what Validate finds, each error prefixed with the
// variable it names.
type problems []error

// add records a problem of ORISUN_<variable>.
func (p *problems) add(variable, format string, args ...any) {
	*p = append(*p, fmt.Errorf("ORISUN_%s: "+format, append([]any{variable}, args...)...))
}

// inRange records a value outside [lo, hi] as "v is outside lo–hi".
func inRange[T int | int32 | time.Duration](p *problems, variable string, v, lo, hi T) {
	if v < lo || v > hi {
		p.add(variable, "%v is outside %s–%s", v, limitText(lo), limitText(hi))
	}
}

// port records a value that is neither a port nor -1 (a random port); zero
// takes the default.
func (p *problems) port(variable string, v int) {
	if v < -1 || v > 65535 {
		p.add(variable, "%d is not a port (1–65535, or -1 for a random one)", v)
	}
}

// readable reports whether a file can be read, and records a problem when
// it cannot.
func (p *problems) readable(variable, path string) bool {
	f, err := os.Open(path)
	if err != nil {
		p.add(variable, "cannot read %s: %v", path, err)
		return false
	}
	f.Close()
	return true
}

// pemCA records a CA file that holds no PEM certificate; the file is known
// to be readable.
func (p *problems) pemCA(variable, path string) {
	pem, _ := os.ReadFile(path)
	if !x509.NewCertPool().AppendCertsFromPEM(pem) {
		p.add(variable, "%s holds no PEM certificate", path)
	}
}

// validateStore checks the backend and what belongs to it, the boundaries
// and SQLite's pragma.
func (c Config) validateStore(p *problems) {
	switch c.Backend {
	case "sqlite":
		// SQLite is one process per data directory: a cluster of nodes
		// would each have a store of their own under one set of streams.
		if c.NATSClusterName != "" {
			p.add("NATS_CLUSTER_NAME", "%q: a NATS cluster of orisun nodes needs ORISUN_BACKEND=postgres; SQLite stays single-node "+
				"(one process owns the data directory). Leave ORISUN_NATS_CLUSTER_NAME empty, or move the store to PostgreSQL", c.NATSClusterName)
		}
		if len(c.NATSClusterRoutes) > 0 {
			p.add("NATS_CLUSTER_ROUTES", "a NATS cluster of orisun nodes needs ORISUN_BACKEND=postgres; SQLite stays single-node")
		}
		// One message per variable: validateNATS leaves the replicas and
		// the cluster's variables of a SQLite node to these.
		if c.StreamReplicas != 1 {
			p.add("NATS_STREAM_REPLICAS", "%d: SQLite stays single-node, so its streams have one replica; unset it (or set 1), "+
				"or move the store to PostgreSQL for a cluster of orisun nodes, whose streams may have 3 or 5", c.StreamReplicas)
		}
	case "postgres":
		if c.PGURL == "" {
			p.add("PG_URL", "is required with ORISUN_BACKEND=postgres (e.g. postgres://user:pass@host:5432/db)")
		} else if err := checkPGURL(c.PGURL); err != "" {
			p.add("PG_URL", "%s", err)
		}
		inRange(p, "PG_MAX_CONNS", c.PGMaxConns, PGMaxConnsMin, PGMaxConnsMax)
	default:
		p.add("BACKEND", "%q is not a backend; use sqlite or postgres", c.Backend)
	}
	if len(c.Boundaries) == 0 {
		p.add("BOUNDARIES", "at least one boundary is required")
	}
	for _, b := range c.Boundaries {
		if err := event.ValidateBoundaryName(b); err != nil {
			// The API's "invalid: " is no word of a configuration error.
			p.add("BOUNDARIES", "%s", strings.TrimPrefix(err.Error(), event.ErrInvalid.Error()+": "))
		}
	}
	switch strings.ToUpper(c.SQLiteSynchronous) {
	case "OFF", "NORMAL", "FULL", "EXTRA":
	default:
		p.add("SQLITE_SYNCHRONOUS", "%q is not one of OFF, NORMAL, FULL, EXTRA", c.SQLiteSynchronous)
	}
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

// validateNATS checks the embedded server, who may connect to it, an
// external NATS, the embedded cluster and the streams' replicas.
func (c Config) validateNATS(p *problems) {
	p.port("NATS_PORT", c.NATSPort)
	c.validateNATSMonitor(p)
	c.validateNATSAuth(p)
	c.validateNATSSystem(p)
	c.validateNATSTLS(p)
	if c.NATSMaxPayload < NATSMaxPayloadMin || c.NATSMaxPayload > NATSMaxPayloadMax {
		p.add("NATS_MAX_PAYLOAD", "%d is outside %d–%d bytes", c.NATSMaxPayload, NATSMaxPayloadMin, NATSMaxPayloadMax)
	}
	c.validateNATSMemory(p)
	c.validateExternalNATS(p)
	if c.NATSClusterName == "" {
		c.refuseClusterWithoutName(p)
	} else {
		c.validateNATSCluster(p)
	}
	switch {
	case c.Backend == "sqlite":
		// validateStore said what SQLite allows.
	case c.StreamReplicas != 1 && c.StreamReplicas != 3 && c.StreamReplicas != 5:
		p.add("NATS_STREAM_REPLICAS", "%d is not 1, 3 or 5", c.StreamReplicas)
	case c.StreamReplicas > 1 && !c.SharedNATS():
		p.add("NATS_STREAM_REPLICAS", "%d: only 1 is possible with a single embedded server; set ORISUN_NATS_CLUSTER_NAME "+
			"(embedded cluster) or ORISUN_NATS_URL (an existing NATS cluster)", c.StreamReplicas)
	}
}

// validateNATSMonitor checks the address of the embedded server's
// monitoring endpoint, which an external NATS does not have.
func (c Config) validateNATSMonitor(p *problems) {
	if c.NATSMonitorAddr == "" || strings.EqualFold(c.NATSMonitorAddr, "off") {
		return
	}
	if _, _, err := monitorAddr(c.NATSMonitorAddr); err != nil {
		p.add("NATS_MONITOR_ADDR", "%q is not host:port or a port (e.g. 8222 or 127.0.0.1:8222 for loopback, "+
			"0.0.0.0:8222 for every interface, or off): %v", c.NATSMonitorAddr, err)
		return
	}
	if c.NATSURL != "" {
		p.add("NATS_MONITOR_ADDR", "%q: with ORISUN_NATS_URL orisun starts no NATS server; monitor the external servers "+
			"themselves (their own http_port), or unset it", c.NATSMonitorAddr)
	}
}

// validateNATSAuth checks the clients' user and password or token, and
// the admin's: which go together, which exclude each other, and that the
// admin's are neither the application's nor, with an external NATS, set.
func (c Config) validateNATSAuth(p *problems) {
	credentials(p, "NATS", c.NATSUser, c.NATSPassword, c.NATSToken)
	if c.NATSAdminUser == "" && c.NATSAdminPassword == "" && c.NATSAdminToken == "" {
		return
	}
	switch {
	case c.NATSURL != "":
		p.add("NATS_ADMIN_USER", "ORISUN_NATS_ADMIN_USER, _PASSWORD and _TOKEN are users of the embedded server; with ORISUN_NATS_URL "+
			"your deployment's users decide who may create boundaries (docs/security.md, \"An existing NATS\")")
	case !credentials(p, "NATS_ADMIN", c.NATSAdminUser, c.NATSAdminPassword, c.NATSAdminToken):
	case c.NATSAdminUser != "" && c.NATSAdminUser == c.NATSUser:
		p.add("NATS_ADMIN_USER", "%q is also ORISUN_NATS_USER; the admin needs a user of its own", c.NATSAdminUser)
	case c.NATSAdminToken != "" && c.NATSAdminToken == c.NATSToken:
		p.add("NATS_ADMIN_TOKEN", "is also ORISUN_NATS_TOKEN; the admin needs a token of its own")
	}
}

// validateNATSSystem checks the system user: both or neither, a user of
// its own, not a name of orisun's, and a password that is no other
// principal's secret; embedded server only.
func (c Config) validateNATSSystem(p *problems) {
	user, password := c.NATSSystemUser, c.NATSSystemPassword
	if user == "" && password == "" {
		return
	}
	switch {
	case c.NATSURL != "":
		p.add("NATS_SYSTEM_USER", "ORISUN_NATS_SYSTEM_USER and _PASSWORD are a user of the embedded server's system account; "+
			"with ORISUN_NATS_URL orisun starts no server: use your deployment's own system account user")
	case user != "" && password == "":
		p.add("NATS_SYSTEM_PASSWORD", "is required with ORISUN_NATS_SYSTEM_USER (%q)", user)
	case password != "" && user == "":
		p.add("NATS_SYSTEM_USER", "is required with ORISUN_NATS_SYSTEM_PASSWORD")
	case user == natsembed.InternalUser || user == natsembed.APIUser || user == natsembed.AnonymousUser:
		p.add("NATS_SYSTEM_USER", "%q is reserved for orisun's own connections; choose another name", user)
	case user == c.NATSUser:
		p.add("NATS_SYSTEM_USER", "%q is also ORISUN_NATS_USER; the system user needs a user of its own", user)
	case user == c.NATSAdminUser:
		p.add("NATS_SYSTEM_USER", "%q is also ORISUN_NATS_ADMIN_USER; the system user needs a user of its own", user)
	case slices.Contains([]string{c.NATSPassword, c.NATSToken, c.NATSAdminPassword, c.NATSAdminToken}, password):
		p.add("NATS_SYSTEM_PASSWORD", "is also the application's or the admin's password or token; the system user needs a password of its own")
	}
}

// credentials checks the user, password and token of ORISUN_<v>_USER,
// _PASSWORD and _TOKEN, and reports whether they are whole.
func credentials(p *problems, v, user, password, token string) bool {
	before := len(*p)
	switch {
	case token != "" && (user != "" || password != ""):
		p.add(v+"_TOKEN", "cannot be combined with ORISUN_%s_USER/ORISUN_%s_PASSWORD; set a token or a user and password, not both", v, v)
	case user != "" && password == "":
		p.add(v+"_PASSWORD", "is required with ORISUN_%s_USER (%q)", v, user)
	case password != "" && user == "":
		p.add(v+"_USER", "is required with ORISUN_%s_PASSWORD", v)
	case user == natsembed.InternalUser || user == natsembed.APIUser || user == natsembed.AnonymousUser:
		p.add(v+"_USER", "%q is reserved for orisun's own connections; choose another name", user)
	}
	return len(*p) == before
}

// validateNATSTLS checks the TLS files: which go together, and that they
// are readable and hold what they should. With an external NATS a CA alone
// verifies the servers; for the embedded server it verifies clients, which
// needs the server's own certificate.
func (c Config) validateNATSTLS(p *problems) {
	switch {
	case c.NATSTLSCert != "" && c.NATSTLSKey == "":
		p.add("NATS_TLS_KEY", "is required with ORISUN_NATS_TLS_CERT (%s)", c.NATSTLSCert)
	case c.NATSTLSKey != "" && c.NATSTLSCert == "":
		p.add("NATS_TLS_CERT", "is required with ORISUN_NATS_TLS_KEY (%s)", c.NATSTLSKey)
	case c.NATSTLSCA != "" && c.NATSTLSCert == "" && c.NATSURL != "":
		if p.readable("NATS_TLS_CA", c.NATSTLSCA) {
			p.pemCA("NATS_TLS_CA", c.NATSTLSCA)
		}
	case c.NATSTLSCA != "" && c.NATSTLSCert == "":
		p.add("NATS_TLS_CA", "needs ORISUN_NATS_TLS_CERT and ORISUN_NATS_TLS_KEY: client certificates are verified only over TLS")
	case c.NATSTLSCert != "":
		certOK := p.readable("NATS_TLS_CERT", c.NATSTLSCert)
		keyOK := p.readable("NATS_TLS_KEY", c.NATSTLSKey)
		if certOK && keyOK {
			if _, err := tls.LoadX509KeyPair(c.NATSTLSCert, c.NATSTLSKey); err != nil {
				p.add("NATS_TLS_CERT", "certificate %s and key %s (ORISUN_NATS_TLS_KEY) do not load as a pair: %v", c.NATSTLSCert, c.NATSTLSKey, err)
			}
		}
		if c.NATSTLSCA != "" && p.readable("NATS_TLS_CA", c.NATSTLSCA) {
			p.pemCA("NATS_TLS_CA", c.NATSTLSCA)
		}
	}
}

// validateNATSMemory checks the embedded server's JetStream memory budget:
// not negative, for the embedded server only, and room for one boundary's
// stream at least.
func (c Config) validateNATSMemory(p *problems) {
	switch {
	case c.NATSMaxMemory == 0:
	case c.NATSMaxMemory < 0:
		p.add("NATS_MAX_MEMORY", "%d is negative; 0 leaves JetStream's default (75%% of the host's memory)", c.NATSMaxMemory)
	case c.NATSURL != "":
		p.add("NATS_MAX_MEMORY", "is the embedded server's JetStream memory; with ORISUN_NATS_URL your servers' own limits apply")
	case c.EventStreamMaxBytes > 0 && c.NATSMaxMemory < c.EventStreamMaxBytes:
		p.add("NATS_MAX_MEMORY", "%d is below ORISUN_NATS_EVENT_STREAM_MAX_BYTES (%d): not one boundary's stream fits", c.NATSMaxMemory, c.EventStreamMaxBytes)
	}
}

// validateExternalNATS checks the URLs of an external NATS and its
// credentials file.
func (c Config) validateExternalNATS(p *problems) {
	if c.NATSURL != "" {
		if c.NATSClusterName != "" {
			p.add("NATS_CLUSTER_NAME", "cannot be combined with ORISUN_NATS_URL: with an external NATS orisun starts no server; "+
				"set one or the other")
		}
		for _, u := range strings.Split(c.NATSURL, ",") {
			pu, err := url.Parse(strings.TrimSpace(u))
			if err != nil || pu.Host == "" || (pu.Scheme != "nats" && pu.Scheme != "tls" && pu.Scheme != "ws" && pu.Scheme != "wss") {
				p.add("NATS_URL", "%q is not a NATS URL (e.g. nats://nats1:4222,nats://nats2:4222)", u)
			}
		}
	}
	if c.NATSCreds != "" {
		switch {
		case c.NATSURL == "":
			p.add("NATS_CREDS", "is the credentials file for ORISUN_NATS_URL, which is not set")
		case c.NATSUser != "" || c.NATSToken != "":
			p.add("NATS_CREDS", "cannot be combined with ORISUN_NATS_USER or ORISUN_NATS_TOKEN; use one way to log in")
		default:
			p.readable("NATS_CREDS", c.NATSCreds)
		}
	}
}

// refuseClusterWithoutName refuses every cluster variable when no cluster
// is named: it would mean nothing, and silence would hide the mistake.
// Host and port are refused only when they differ from their defaults (an
// unset variable reads as its default; a Config built in Go may leave them
// zero).
func (c Config) refuseClusterWithoutName(p *problems) {
	port := ""
	if c.NATSClusterPort != 0 && c.NATSClusterPort != NATSClusterPortDefault {
		port = strconv.Itoa(c.NATSClusterPort)
	}
	host := ""
	if c.NATSClusterHost != "" && c.NATSClusterHost != NATSClusterHostDefault {
		host = c.NATSClusterHost
	}
	why := "is set but ORISUN_NATS_CLUSTER_NAME is not: name the cluster to join the embedded servers"
	routes := strings.Join(c.NATSClusterRoutes, ",")
	if c.Backend == "sqlite" {
		// Naming the cluster is no way out on SQLite, and validateStore
		// has refused the routes.
		why = "is set, but SQLite stays single-node: there is no NATS cluster to join; unset it, or move the store to PostgreSQL"
		routes = ""
	}
	for _, v := range []struct{ name, value string }{
		{"NATS_CLUSTER_ROUTES", routes},
		{"NATS_CLUSTER_HOST", host},
		{"NATS_CLUSTER_PORT", port},
		{"NATS_CLUSTER_USER", c.NATSClusterUser},
		{"NATS_CLUSTER_PASSWORD", c.NATSClusterPassword},
		{"NATS_CLUSTER_TLS_CERT", c.NATSClusterTLSCert},
		{"NATS_CLUSTER_TLS_KEY", c.NATSClusterTLSKey},
		{"NATS_CLUSTER_TLS_CA", c.NATSClusterTLSCA},
	} {
		if v.value != "" {
			p.add(v.name, "%s", why)
		}
	}
}

// validateNATSCluster checks a named cluster: its name, listener, routes,
// route authentication and TLS between the servers.
func (c Config) validateNATSCluster(p *problems) {
	if strings.ContainsAny(c.NATSClusterName, " \t.*>") {
		p.add("NATS_CLUSTER_NAME", "%q: use letters, digits, - and _ only", c.NATSClusterName)
	}
	p.port("NATS_CLUSTER_PORT", c.NATSClusterPort)
	for _, r := range c.NATSClusterRoutes {
		u, err := url.Parse(strings.TrimSpace(r))
		if err != nil || u.Host == "" || u.Port() == "" || (u.Scheme != "nats-route" && u.Scheme != "nats" && u.Scheme != "tls") {
			p.add("NATS_CLUSTER_ROUTES", "%q is not a route URL (e.g. nats-route://orisun2:6222)", r)
		}
	}
	switch {
	case c.NATSClusterUser != "" && c.NATSClusterPassword == "":
		p.add("NATS_CLUSTER_PASSWORD", "is required with ORISUN_NATS_CLUSTER_USER (%q)", c.NATSClusterUser)
	case c.NATSClusterPassword != "" && c.NATSClusterUser == "":
		p.add("NATS_CLUSTER_USER", "is required with ORISUN_NATS_CLUSTER_PASSWORD")
	}
	switch {
	case (c.NATSClusterTLSCert == "") != (c.NATSClusterTLSKey == ""):
		p.add("NATS_CLUSTER_TLS_KEY", "ORISUN_NATS_CLUSTER_TLS_CERT and ORISUN_NATS_CLUSTER_TLS_KEY go together")
	case c.NATSClusterTLSCA != "" && c.NATSClusterTLSCert == "":
		p.add("NATS_CLUSTER_TLS_CA", "needs ORISUN_NATS_CLUSTER_TLS_CERT and ORISUN_NATS_CLUSTER_TLS_KEY")
	case c.NATSClusterTLSCert != "":
		if p.readable("NATS_CLUSTER_TLS_CERT", c.NATSClusterTLSCert) && p.readable("NATS_CLUSTER_TLS_KEY", c.NATSClusterTLSKey) {
			if _, err := tls.LoadX509KeyPair(c.NATSClusterTLSCert, c.NATSClusterTLSKey); err != nil {
				p.add("NATS_CLUSTER_TLS_CERT", "certificate %s and key %s do not load as a pair: %v", c.NATSClusterTLSCert, c.NATSClusterTLSKey, err)
			}
		}
		if c.NATSClusterTLSCA != "" {
			p.readable("NATS_CLUSTER_TLS_CA", c.NATSClusterTLSCA)
		}
	}
}

// validatePublisher checks the publishers' batch, window and cadence, and
// the lease that decides which node publishes.
func (c Config) validatePublisher(p *problems) {
	inRange(p, "PUBLISH_BATCH", c.PublishBatch, PublishBatchMin, PublishBatchMax)
	inRange(p, "PUBLISH_WINDOW", c.PublishWindow, PublishWindowMin, PublishWindowMax)
	inRange(p, "POLL_INTERVAL", c.PollInterval, PollIntervalMin, PollIntervalMax)
	inRange(p, "POLL_BACKSTOP", c.PollBackstop, PollBackstopMin, PollBackstopMax)
	inRange(p, "LEASE_TTL", c.LeaseTTL, LeaseTTLMin, LeaseTTLMax)
}

// validateAppends checks the group commit and the limits of one append.
func (c Config) validateAppends(p *problems) {
	inRange(p, "APPEND_GROUP_MAX", c.AppendGroupMax, AppendGroupMaxMin, AppendGroupMaxMax)
	if c.AppendGroupDelay > AppendGroupDelayMax {
		p.add("APPEND_GROUP_DELAY", "%s is above %s (a negative value turns the wait off)", c.AppendGroupDelay, limitText(AppendGroupDelayMax))
	}
	// Zero follows the lease TTL, as New fills it (withDefaults).
	c.AppendTxTimeout = cmp.Or(c.AppendTxTimeout, AppendTxTimeoutFor(c.LeaseTTL))
	inRange(p, "APPEND_TX_TIMEOUT", c.AppendTxTimeout, AppendTxTimeoutMin, AppendTxTimeoutMax)
	// On SQLite, Node.AppendTx holds the writer's only connection, which
	// the lease renewals need: a transaction as long as half the lease
	// TTL would let the node's own leases expire behind it.
	if c.Backend == "sqlite" && c.LeaseTTL >= LeaseTTLMin && c.LeaseTTL <= LeaseTTLMax &&
		c.AppendTxTimeout >= AppendTxTimeoutMin && c.AppendTxTimeout <= AppendTxTimeoutMax && 2*c.AppendTxTimeout >= c.LeaseTTL {
		p.add("APPEND_TX_TIMEOUT", "%s is not below half of ORISUN_LEASE_TTL (%s): an application transaction (Node.AppendTx) "+
			"holds the SQLite writer's only connection, which the lease renewals need; set ORISUN_APPEND_TX_TIMEOUT below %s "+
			"or raise ORISUN_LEASE_TTL", limitText(c.AppendTxTimeout), limitText(c.LeaseTTL), limitText(c.LeaseTTL/2))
	}
	inRange(p, "MAX_APPEND_EVENTS", c.MaxAppendEvents, MaxAppendEventsMin, MaxAppendEventsMax)
	inRange(p, "MAX_APPEND_BYTES", c.MaxAppendBytes, MaxAppendBytesMin, MaxAppendBytesMax)
}

// validateStatus checks the status listener's address and the stall
// threshold of its /readyz.
func (c Config) validateStatus(p *problems) {
	if c.HTTPEnabled() {
		host, port, err := net.SplitHostPort(c.HTTPAddr)
		if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 0 || n > 65535 {
			p.add("HTTP_ADDR", "%q is not host:port (e.g. 127.0.0.1:8990, :8990 for every interface, or off)", c.HTTPAddr)
		} else if host != "" && net.ParseIP(host) == nil && strings.ContainsAny(host, " /") {
			p.add("HTTP_ADDR", "%q: %q is not a host name or address", c.HTTPAddr, host)
		}
	}
	inRange(p, "STALL_THRESHOLD", c.StallThreshold, StallThresholdMin, StallThresholdMax)
	switch {
	case c.MetricsBoundaries == 0:
		// New takes the default for a zero field; a variable set to 0 must
		// not turn into 100 boundary labels behind the operator's back.
		p.add("METRICS_BOUNDARIES", "0 would give every boundary's series to boundary=\"_other\": write -1 for that "+
			"(no boundary has series of its own), 1–%d for that many, or leave it unset for the default %d",
			MetricsBoundariesMax, MetricsBoundariesDefault)
	case c.MetricsBoundaries < MetricsBoundariesMin || c.MetricsBoundaries > MetricsBoundariesMax:
		p.add("METRICS_BOUNDARIES", "%d is outside %d–%d (-1: no boundary has series of its own)",
			c.MetricsBoundaries, MetricsBoundariesMin, MetricsBoundariesMax)
	}
}

// validateConsole checks the console's credentials: both or neither, a
// user name basic auth can carry, and a listener to use them on.
func (c Config) validateConsole(p *problems) {
	user, password := c.ConsoleUser, c.ConsolePassword
	switch {
	case user == "" && password == "":
	case user != "" && password == "":
		p.add("CONSOLE_PASSWORD", "is required with ORISUN_CONSOLE_USER (%q)", user)
	case password != "" && user == "":
		p.add("CONSOLE_USER", "is required with ORISUN_CONSOLE_PASSWORD")
	case strings.Contains(user, ":") || strings.IndexFunc(user, unicode.IsControl) >= 0:
		p.add("CONSOLE_USER", "%q holds a colon or a control character, which HTTP basic auth cannot carry", user)
	case len(password) < ConsolePasswordMin:
		p.add("CONSOLE_PASSWORD", "has %d characters; at least %d", len(password), ConsolePasswordMin)
	case !c.HTTPEnabled():
		p.add("CONSOLE_USER", "is set but the listener is off (ORISUN_HTTP_ADDR=%q): set ORISUN_HTTP_ADDR, or unset the console's credentials", c.HTTPAddr)
	}
}

// validateLogs checks the log level and format.
func (c Config) validateLogs(p *problems) {
	switch strings.ToLower(c.LogLevel) {
	case "debug", "info", "warn", "error":
	default:
		p.add("LOG_LEVEL", "%q is not one of debug, info, warn, error", c.LogLevel)
	}
	switch strings.ToLower(c.LogFormat) {
	case "text", "json":
	default:
		p.add("LOG_FORMAT", "%q is not one of text, json", c.LogFormat)
	}
}
