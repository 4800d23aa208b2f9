// Package natsembed runs the NATS server with JetStream inside the orisun
// process. Event streams are memory streams (the store is the source of
// truth); the server's store directory only holds JetStream's own state.
// It is orisun's machinery, not for import by applications: its API may
// change without notice, and such a change is not a breaking change of
// orisun.
//
// Lifecycle: New → Start (fails unless the server is ready for connections)
// → Connect (in-process connections, no TCP) → Stop (Shutdown and wait).
// Stop is safe to call twice and before Start.
//
// Access control (auth.go) is always on. orisun's own connections log in,
// in process only, as internal users with a random password made at Start.
// Every other client is the application principal, with AppPermissions
// (use the API, read the event streams, never write into them): with Auth
// it must log in with the user and password or the token and is refused
// otherwise; without Auth it connects without credentials. Admin, when
// set, is a principal that may also create boundaries (AdminPermissions);
// with neither, every client may. System, when set, is the operator's
// user in the server's system account, for the `nats server …` tooling
// (SystemPermissions). TLS, when set, is required of TCP
// clients. MaxMemory is JetStream's memory budget (Memory reports it and
// what the streams reserve).
package natsembed

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Config of the embedded server.
type Config struct {
	// Host to listen on for clients; default 127.0.0.1 (loopback only).
	Host string
	// Port for clients; 0 means 4222, -1 a random free port (tests).
	Port int
	// StoreDir is JetStream's store directory (required).
	StoreDir string
	// MaxPayload is the largest message the server accepts; 0 means the
	// NATS default (1 MB).
	MaxPayload int32
	// ServerName names the server; default "orisun".
	ServerName string
	// ReadyTimeout bounds the wait for the server to accept connections.
	ReadyTimeout time.Duration
	// Auth, when set, requires application clients to authenticate. Nil:
	// they connect without credentials. Either way they are limited to
	// AppPermissions (keep Host on loopback without Auth: whoever reaches
	// the port may use the API and read every stream).
	Auth *Auth
	// Admin, when set, is the admin principal: the application's
	// permissions and boundary creation (AdminPermissions). Without it,
	// boundaries can be created over NATS only when Auth is nil too (every
	// client may then); with Auth and no Admin, by nobody over NATS.
	Admin *Auth
	// System, when set, is the operator's system user: User and Password
	// (no token) of a client registered into the server's system account
	// ($SYS), where the `nats server …` commands of the nats CLI (server
	// ls, ping, info, report jetstream) and other system-account tooling
	// send their requests. Limited to SystemPermissions (the server's
	// monitoring requests, never JetStream), and in an account of its own:
	// it sees every connection, account and stream of the server but
	// cannot publish into the event streams. Nil: nobody is in the system
	// account.
	System *Auth
	// MaxMemory is JetStream's memory budget: the most bytes its memory
	// streams may reserve (every boundary's stream reserves its max bytes).
	// 0 leaves JetStream's default: 75% of the host's memory, or of
	// GOMEMLIMIT when that is lower.
	MaxMemory int64
	// TLS, when set, requires TLS of TCP clients.
	TLS *TLS
	// Cluster, when set, joins this server to a NATS cluster with
	// clustered JetStream. ServerName must then be unique in the cluster
	// and stay the same across restarts of the node (it names the
	// JetStream peer).
	Cluster *Cluster
	// Monitor, when set, turns on the server's own HTTP monitoring
	// endpoint (/varz, /jsz, /connz, /healthz, …), which
	// prometheus-nats-exporter and nats-top read. It has no
	// authentication: keep it on loopback or a private network.
	Monitor *Monitor
	Logger  *slog.Logger

	// permissionsOff, for the negative control of docs/test-plan.md S13
	// only, installs no authenticator when Auth is nil: every client may
	// then do anything, as before the permission model was always on. Set
	// through internal/testhooks (hooks.go), never by production code.
	permissionsOff bool
}

// Cluster joins the embedded servers of several orisun nodes into one NATS
// cluster. Routes may include this server's own URL (the server skips it),
// so every node can be given the same list.
type Cluster struct {
	Name string
	// Host and Port are where the server listens for routes; Port -1
	// picks a free port (tests).
	Host string
	Port int
	// Routes are the other servers, nats-route://host:port.
	Routes []string
	// User and Password, when set, are required of routes connecting to
	// this server and presented to the routes it connects to (unless a
	// route URL carries its own).
	User, Password string
	// TLS, when set, is required between the servers; with CAFile the
	// peers' certificates are verified against it.
	TLS *TLS
}

// Monitor is where the server's monitoring endpoint listens.
type Monitor struct {
	// Host is the interface; empty means 127.0.0.1 (loopback only).
	Host string
	// Port is the port; 0 or -1 picks a free one (see MonitorURL).
	Port int
}

// Server is an embedded NATS server with JetStream.
type Server struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	ns      *server.Server
	auth    *authenticator
	stopped bool
}

// New checks the configuration and returns a server that is not started.
func New(cfg Config) (*Server, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("natsembed: StoreDir is required")
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.Port == 0 {
		cfg.Port = 4222
	}
	if cfg.ServerName == "" {
		cfg.ServerName = "orisun"
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Auth.Validate(); err != nil {
		return nil, err
	}
	if err := validateAdmin(cfg.Auth, cfg.Admin); err != nil {
		return nil, err
	}
	if err := validateSystem(cfg.Auth, cfg.Admin, cfg.System); err != nil {
		return nil, err
	}
	if cfg.MaxMemory < 0 {
		return nil, fmt.Errorf("natsembed: MaxMemory %d is negative", cfg.MaxMemory)
	}
	if cfg.TLS != nil {
		if _, err := cfg.TLS.tlsConfig(); err != nil {
			return nil, err
		}
	}
	return &Server{cfg: cfg, log: cfg.Logger}, nil
}

// Start starts the server and waits until it accepts connections.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return errors.New("natsembed: server was stopped")
	}
	if s.ns != nil {
		return nil
	}
	opts := &server.Options{
		ServerName: s.cfg.ServerName,
		Host:       s.cfg.Host,
		Port:       s.cfg.Port,
		JetStream:  true,
		StoreDir:   s.cfg.StoreDir,
		NoSigs:     true,
		MaxPayload: s.cfg.MaxPayload,

		JetStreamMaxMemory: s.cfg.MaxMemory,
	}
	var auth *authenticator
	if s.cfg.Auth != nil || s.cfg.Admin != nil || s.cfg.System != nil || !s.cfg.permissionsOff {
		a, err := newAuthenticator(s.cfg.Auth, s.cfg.Admin, s.cfg.System)
		if err != nil {
			return err
		}
		auth = a
		opts.CustomClientAuthentication = a
	}
	if m := s.cfg.Monitor; m != nil {
		// Plain HTTP, whatever the clients' TLS: nats-server serves
		// HTTPS only on a port of its own (HTTPSPort).
		opts.HTTPHost = m.Host
		if opts.HTTPHost == "" {
			opts.HTTPHost = "127.0.0.1"
		}
		opts.HTTPPort = m.Port
		if opts.HTTPPort == 0 {
			opts.HTTPPort = -1 // 0 would mean off
		}
	}
	if s.cfg.TLS != nil {
		tc, err := s.cfg.TLS.tlsConfig()
		if err != nil {
			return err
		}
		// TCP clients must use TLS; in-process connections are exempt
		// (the server lets them in without TLS).
		opts.TLSConfig = tc
		opts.TLSVerify = s.cfg.TLS.CAFile != ""
	}
	if cl := s.cfg.Cluster; cl != nil {
		if err := s.clusterOptions(opts, cl); err != nil {
			return err
		}
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("natsembed: configure server: %w", err)
	}
	if auth != nil {
		// Before Start: the server sets up its system account there, and
		// the authenticator registers the system user into it.
		auth.srv = ns
	}
	// The server's warnings and errors go to slog; a fatal error (the port
	// is taken) ends Start at once instead of waiting for readiness.
	fatal := make(chan string, 1)
	lg := &logger{log: s.log, fatal: fatal}
	ns.SetLogger(lg, false, false)
	go ns.Start()
	deadline := time.Now().Add(s.cfg.ReadyTimeout)
	for !ns.ReadyForConnections(50 * time.Millisecond) {
		var reason string
		select {
		case reason = <-fatal:
		default:
			if time.Now().Before(deadline) {
				continue
			}
			reason = fmt.Sprintf("not ready for connections within %s", s.cfg.ReadyTimeout)
		}
		ns.Shutdown()
		ns.WaitForShutdown()
		if l := listenError(reason, s.cfg); l != nil {
			return fmt.Errorf("natsembed: server on %s:%d: %w", s.cfg.Host, s.cfg.Port, l)
		}
		return fmt.Errorf("natsembed: server on %s:%d: %s", s.cfg.Host, s.cfg.Port, reason)
	}
	lg.started.Store(true)
	s.ns = ns
	s.auth = auth
	s.log.Info("embedded NATS server ready", "url", ns.ClientURL(), "store_dir", s.cfg.StoreDir, "server_name", s.cfg.ServerName,
		"cluster", s.cfg.Cluster != nil, "monitor", monitorURL(ns),
		"auth", s.cfg.Auth != nil, "admin", s.cfg.Admin != nil, "system_user", s.cfg.System != nil, "permissions", auth != nil, "tls", s.cfg.TLS != nil, "client_certificates", s.cfg.TLS != nil && s.cfg.TLS.CAFile != "")
	return nil
}

// clusterOptions sets the cluster listener, the routes and their
// authentication and TLS.
func (s *Server) clusterOptions(opts *server.Options, cl *Cluster) error {
	opts.Cluster = server.ClusterOpts{
		Name:     cl.Name,
		Host:     cl.Host,
		Port:     cl.Port,
		Username: cl.User,
		Password: cl.Password,
	}
	if cl.Host == "" {
		opts.Cluster.Host = "127.0.0.1"
	}
	for _, r := range cl.Routes {
		u, err := url.Parse(strings.TrimSpace(r))
		if err != nil || u.Host == "" {
			return fmt.Errorf("natsembed: route %q is not a URL (nats-route://host:port)", r)
		}
		if u.User == nil && cl.User != "" {
			u.User = url.UserPassword(cl.User, cl.Password)
		}
		opts.Routes = append(opts.Routes, u)
	}
	if cl.TLS != nil {
		tc, err := cl.TLS.tlsConfig()
		if err != nil {
			return fmt.Errorf("natsembed: cluster %w", err)
		}
		// A server is both ends of its routes: as nats-server does for a
		// cluster block, the CA verifies peers when accepting (client
		// certificates required) and when connecting (root CAs). Without a
		// CA, peers are verified against the system roots.
		if cl.TLS.CAFile != "" {
			tc.ClientAuth = tls.RequireAndVerifyClientCert
			tc.RootCAs = tc.ClientCAs
		}
		opts.Cluster.TLSConfig = tc
		opts.Cluster.TLSTimeout = 2
	}
	return nil
}

// ClusterURL is the URL other servers route to (empty when not clustered
// or not started).
func (s *Server) ClusterURL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ns == nil || s.cfg.Cluster == nil {
		return ""
	}
	addr := s.ns.ClusterAddr()
	if addr == nil {
		return ""
	}
	return "nats-route://" + addr.String()
}

// Peers lists the names of the servers this one has routes to (empty when
// not clustered or not started).
func (s *Server) Peers() []string {
	s.mu.Lock()
	ns := s.ns
	s.mu.Unlock()
	if ns == nil {
		return nil
	}
	rz, err := ns.Routez(nil)
	if err != nil {
		return nil
	}
	seen := map[string]bool{}
	var peers []string
	for _, r := range rz.Routes {
		if !seen[r.RemoteName] {
			seen[r.RemoteName] = true
			peers = append(peers, r.RemoteName)
		}
	}
	return peers
}

// Memory returns JetStream's memory budget on this server (the most its
// memory streams may reserve), how much of it the streams have reserved and
// how many streams there are, the last two read together: JetStream
// refuses a stream whose max bytes do not fit the difference ("insufficient
// memory resources"). In a cluster the last two are the cluster's (every
// stream's max bytes once, whatever its replicas), which is what each
// server holds when every stream has a replica on every server
// (JetStreamClusterSize equal to the replicas).
func (s *Server) Memory() (budget, reserved int64, streams int, err error) {
	s.mu.Lock()
	ns := s.ns
	s.mu.Unlock()
	if ns == nil {
		return 0, 0, 0, errors.New("natsembed: server not started")
	}
	cfg := ns.JetStreamConfig()
	if cfg == nil {
		return 0, 0, 0, errors.New("natsembed: JetStream is not enabled")
	}
	// Every client of this server is in its global account.
	u := ns.GlobalAccount().JetStreamUsage()
	return cfg.MaxMemory, int64(u.ReservedMemory), u.Streams, nil
}

// StreamBytes is what this server's memory streams hold, in bytes (0 when
// it is not started or JetStream is off): the part of the process's heap
// that internal/gctune keeps out of the collector's room.
func (s *Server) StreamBytes() int64 {
	s.mu.Lock()
	ns := s.ns
	s.mu.Unlock()
	if ns == nil {
		return 0
	}
	v, err := ns.Varz(nil)
	if err != nil || v.JetStream.Stats == nil {
		return 0
	}
	return int64(v.JetStream.Stats.Memory)
}

// JetStreamClusterSize is the size of the JetStream cluster this server is
// in (the servers of its meta group, configured or since joined) and
// whether the group knows its leader, which means this server applied the
// cluster's stream assignments that Memory counts; 0 when the server is
// not clustered.
func (s *Server) JetStreamClusterSize() (size int, led bool, err error) {
	s.mu.Lock()
	ns := s.ns
	s.mu.Unlock()
	if ns == nil {
		return 0, false, errors.New("natsembed: server not started")
	}
	if !ns.JetStreamIsClustered() {
		return 0, false, nil
	}
	jsz, err := ns.Jsz(&server.JSzOptions{})
	if err != nil {
		return 0, false, fmt.Errorf("natsembed: JetStream cluster: %w", err)
	}
	if jsz.Meta == nil {
		return 0, false, nil
	}
	return jsz.Meta.Size, jsz.Meta.Leader != "", nil
}

// MonitorURL is the base URL of the server's monitoring endpoint
// (http://host:port; append /varz, /jsz, …), empty when Config.Monitor is
// nil or the server is not started.
func (s *Server) MonitorURL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ns == nil {
		return ""
	}
	return monitorURL(s.ns)
}

func monitorURL(ns *server.Server) string {
	addr := ns.MonitorAddr()
	if addr == nil {
		return ""
	}
	return "http://" + addr.String()
}

// ClientURL is the URL NATS clients connect to.
func (s *Server) ClientURL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ns == nil {
		return ""
	}
	return s.ns.ClientURL()
}

// MaxPayload is the largest message the server accepts.
func (s *Server) MaxPayload() int {
	if s.cfg.MaxPayload > 0 {
		return int(s.cfg.MaxPayload)
	}
	return 1024 * 1024
}

// Connect opens an in-process client connection with every permission
// (orisun's own: it publishes events and manages the streams).
func (s *Server) Connect(name string, opts ...nats.Option) (*nats.Conn, error) {
	return s.connect(name, InternalUser, opts...)
}

// ConnectAPI opens the in-process connection of the API service: it may
// answer requests on any reply subject except the event subjects,
// JetStream's API and orisun's own inboxes (see APIPermissions).
func (s *Server) ConnectAPI(name string, opts ...nats.Option) (*nats.Conn, error) {
	return s.connect(name, APIUser, opts...)
}

func (s *Server) connect(name, user string, opts ...nats.Option) (*nats.Conn, error) {
	s.mu.Lock()
	ns, auth := s.ns, s.auth
	s.mu.Unlock()
	if ns == nil {
		return nil, errors.New("natsembed: server not started")
	}
	all := []nats.Option{
		nats.InProcessServer(ns),
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.CustomInboxPrefix(InternalInboxPrefix),
	}
	if auth != nil {
		all = append(all, nats.UserInfo(user, auth.internalPassword))
	}
	all = append(all, opts...)
	nc, err := nats.Connect("", all...)
	if err != nil {
		return nil, fmt.Errorf("natsembed: connect %s: %w", name, err)
	}
	return nc, nil
}

// Stop shuts the server down and waits for it.
func (s *Server) Stop() {
	s.mu.Lock()
	ns := s.ns
	s.ns = nil
	s.auth = nil
	s.stopped = true
	s.mu.Unlock()
	if ns != nil {
		ns.Shutdown()
		ns.WaitForShutdown()
	}
}

// logger forwards the server's log to slog: notices at debug (they are many
// and routine), warnings and errors as such. A fatal error is reported to
// Start and never exits the process.
type logger struct {
	log   *slog.Logger
	fatal chan string
	// started is set once Start has returned: a fatal error before is
	// Start's error, which its caller reports (logging it here too would
	// say it twice); one after is logged.
	started atomic.Bool
}

func (l *logger) Noticef(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *logger) Warnf(format string, v ...any)   { l.log.Warn(fmt.Sprintf(format, v...)) }
func (l *logger) Errorf(format string, v ...any)  { l.log.Error(fmt.Sprintf(format, v...)) }
func (l *logger) Debugf(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *logger) Tracef(format string, v ...any)  {}
func (l *logger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	if l.started.Load() {
		l.log.Error(msg)
		return
	}
	select {
	case l.fatal <- msg:
	default:
	}
}

// ListenError is a listener of the server that could not be opened (its
// port is taken, or not allowed): Start's error wraps it, so that the
// caller can name the setting that chose the port.
type ListenError struct {
	// Listener is "client" (Config.Host and Port) or "cluster" (the
	// route listener, Cluster.Host and Port).
	Listener string
	// Addr is host:port.
	Addr string
	// Reason is the server's own words.
	Reason string
}

func (e *ListenError) Error() string {
	what := "clients"
	if e.Listener == "cluster" {
		what = "the cluster's routes"
	}
	return fmt.Sprintf("cannot listen for NATS %s on %s: %s", what, e.Addr, e.Reason)
}

// Cause is the operating system's reason, as the server quotes it
// ("listen tcp 127.0.0.1:4222: bind: address already in use"), or the
// server's whole message when it quotes none.
func (e *ListenError) Cause() string {
	if i := strings.Index(e.Reason, "listen tcp"); i >= 0 {
		return strings.Trim(e.Reason[i:], `"`)
	}
	return e.Reason
}

// listenError recognises the server's fatal error of a listener that
// could not be opened (nil for any other).
func listenError(reason string, cfg Config) *ListenError {
	switch {
	case strings.HasPrefix(reason, "Error listening on router port"):
		addr := ""
		if cfg.Cluster != nil {
			addr = net.JoinHostPort(cfg.Cluster.Host, strconv.Itoa(cfg.Cluster.Port))
		}
		return &ListenError{Listener: "cluster", Addr: addr, Reason: reason}
	case strings.HasPrefix(reason, "Error listening on port"):
		return &ListenError{Listener: "client", Addr: net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)), Reason: reason}
	}
	return nil
}
