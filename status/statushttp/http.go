package statushttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/orisun-io/orisun/internal/serviceutil"
	"github.com/orisun-io/orisun/internal/startstop"
	"github.com/orisun-io/orisun/status"
)

// Options of the HTTP listener.
type Options struct {
	// Addr is host:port to listen on (port 0: a free one).
	Addr string
	// StallThreshold is how long a publisher may be stalled before /readyz
	// says not ready.
	StallThreshold time.Duration
	// Timeout bounds one measurement (a store that does not answer makes
	// the measurement report it, not hang the request).
	Timeout time.Duration
	Logger  *slog.Logger
	// Collectors are served on /metrics beside the status's gauges (the
	// node's counters and histograms).
	Collectors []prometheus.Collector
	// BoundaryLabel is the boundary label of a boundary's gauges: its
	// name, or another value shared by the boundaries beyond the node's
	// cap, whose gauges are then summed (see Metrics). Nil: the name.
	BoundaryLabel func(boundary string) string
	// Console is who may open the console's event pages.
	Console ConsoleAccess
	// Events is what the console's boundary pages read (nil: none).
	Events ConsoleSource
	// MaxTails caps the console's live tails open at once (0:
	// DefaultMaxTails); one more is refused with 503.
	MaxTails int
	// TailWriteTimeout bounds each write of a live tail (0:
	// DefaultTailWriteTimeout): a client that stopped reading ends its
	// tail, and its subscription, within it.
	TailWriteTimeout time.Duration
}

// Server is the HTTP listener of a node. Its goroutines (the listener's,
// each measurement's) are its life's (startstop.Base).
type Server struct {
	src  status.Source
	opts Options
	log  *slog.Logger
	reg  *prometheus.Registry
	life startstop.Base
	// connSeen, when a test sets it, sees each accepted connection
	// after the listener set its options.
	connSeen func(net.Conn)

	mu       sync.Mutex
	srv      *http.Server
	ln       net.Listener
	stopping bool

	// flight is the measurement in progress: concurrent requests (probes,
	// scrapes, a CLI polling) share it instead of each running 4 store
	// queries per boundary. Each still gets a measurement that started
	// after its request arrived or while it waited, never a cached one.
	fmu    sync.Mutex
	flight *measurement

	// stopCtx ends when the listener stops: the console's live tails end
	// with it, so that the shutdown does not wait on them.
	stopCtx context.Context
	stopAll context.CancelFunc

	// tails holds a token per live tail open (Options.MaxTails).
	tails chan struct{}
}

type measurement struct {
	done chan struct{}
	st   status.Status
	err  error
}

// NewServer returns a server of src's status; Start listens.
func NewServer(src status.Source, opts Options) *Server {
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.StallThreshold <= 0 {
		opts.StallThreshold = 30 * time.Second
	}
	if opts.MaxTails <= 0 {
		opts.MaxTails = DefaultMaxTails
	}
	if opts.TailWriteTimeout <= 0 {
		opts.TailWriteTimeout = DefaultTailWriteTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{src: src, opts: opts, log: opts.Logger, tails: make(chan struct{}, opts.MaxTails)}
	s.stopCtx, s.stopAll = context.WithCancel(context.Background())
	s.reg = prometheus.NewRegistry()
	s.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&collector{measure: s.measureShared, label: opts.BoundaryLabel},
	)
	s.reg.MustRegister(opts.Collectors...)
	return s
}

// Handler serves /status, /healthz, /readyz, /metrics and the console.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", s.status)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	s.consoleHandlers(mux)
	return loopbackHosts(mux, listenName(s.opts.Addr))
}

// listenName is the host name in a listen address (ORISUN_HTTP_ADDR=
// myhost:8080), or "" when it gives an address or none: the name the
// operator chose for the listener is one of its own.
func listenName(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" || net.ParseIP(host) != nil {
		return ""
	}
	return host
}

// loopbackHosts guards a loopback listener against DNS rebinding: a page
// of another site whose name the attacker turns to 127.0.0.1 reaches the
// listener from the operator's own browser, with the site's name as its
// Host. On a loopback listener (one whose connection's local address is a
// loopback address) only a Host of localhost, a loopback address, the
// listener's own address or the name it was told to listen on
// (ORISUN_HTTP_ADDR=myhost:8080, where myhost is 127.0.1.1), with any
// port or none, is served; any other
// is refused with 421, saying why. /healthz and /readyz stay open to any
// Host, for probes that name the node otherwise; /readyz then answers its
// code and "ready" only, without the reasons (they name boundaries, event
// ids, the store's address and user). A listener on another address
// is reached by other names by design: its event pages need the console's
// credentials (docs/console.md, "Access").
func loopbackHosts(h http.Handler, own string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		wildcard, _ := r.Context().Value(wildcardListener{}).(bool)
		if r.URL.Path == "/healthz" || local == nil || wildcard || hostAllowed(r.Host, local, own) {
			h.ServeHTTP(w, r)
			return
		}
		if r.URL.Path == "/readyz" {
			h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), foreignHost{}, true)))
			return
		}
		http.Error(w, fmt.Sprintf("Host %q is not this listener's: a listener on loopback (ORISUN_HTTP_ADDR=%s) answers only to "+
			"localhost, 127.0.0.1, [::1], its own address or the name in ORISUN_HTTP_ADDR, with or without the port (a guard against DNS rebinding); "+
			"to reach it by another name, listen on that address and set ORISUN_CONSOLE_USER and ORISUN_CONSOLE_PASSWORD",
			r.Host, local.String()), http.StatusMisdirectedRequest)
	})
}

// wildcardListener marks a connection accepted by a listener on every
// address (ORISUN_HTTP_ADDR=:8080 or 0.0.0.0:8080): it is reached by
// other names by design, and a connection that arrives over loopback
// (the host's own name, 127.0.1.1 on Debian) is no loopback listener's.
type wildcardListener struct{}

// foreignHost marks a request whose Host loopbackHosts did not allow:
// /readyz answers it without reasons.
type foreignHost struct{}

// hostAllowed says whether host (a request's Host, with or without a
// port) may reach a listener on local: always when local is not a
// loopback address; else only localhost, a loopback address, local's own
// address, or own (the name the listener was told to listen on; "" for
// none).
func hostAllowed(host string, local net.Addr, own string) bool {
	tcp, ok := local.(*net.TCPAddr)
	if !ok || !tcp.IP.IsLoopback() {
		return true
	}
	name := host
	// Any port: a tunnel (ssh -L 9000:localhost:8080) keeps the name
	// and changes the port; a rebinding attack needs a name.
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		name = host[1 : len(host)-1]
	}
	if strings.EqualFold(name, "localhost") || (own != "" && strings.EqualFold(name, own)) {
		return true
	}
	ip := net.ParseIP(name)
	return ip != nil && (ip.IsLoopback() || ip.Equal(tcp.IP))
}

// Start listens on Options.Addr and serves in the background. A taken
// address is an error at once, naming it. A second Start does nothing;
// Start after Stop, or after a Start that failed, is an error.
func (s *Server) Start() error {
	err := s.life.Start(context.Background(), s.listen, s.shutdown)
	if errors.Is(err, startstop.ErrStopped) {
		return fmt.Errorf("status HTTP listener: %w", err)
	}
	return err
}

func (s *Server) listen(context.Context) error {
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("status HTTP listener on %s (ORISUN_HTTP_ADDR): %w; stop what listens there, or set ORISUN_HTTP_ADDR "+
			"to a free address (host:port; port 0: a random one) or to off for no listener", s.opts.Addr, err)
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			// Best effort: without it a vanished client's tail lasts
			// until TCP gives up.
			_ = setUserTimeout(c, UserTimeout)
			if tcp, ok := ln.Addr().(*net.TCPAddr); ok && tcp.IP.IsUnspecified() {
				ctx = context.WithValue(ctx, wildcardListener{}, true)
			}
			if s.connSeen != nil {
				s.connSeen(c)
			}
			return ctx
		}}
	s.mu.Lock()
	s.ln, s.srv = ln, srv
	s.mu.Unlock()
	s.life.Go(func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("status HTTP listener failed", "addr", ln.Addr().String(), "err", err)
		}
	})
	s.log.Info("status HTTP listener ready", "addr", ln.Addr().String())
	return nil
}

// Addr is the address it listens on (after Start).
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Stopping makes /readyz say not ready from now on: the node is shutting
// down and load balancers should move away before the listener closes.
func (s *Server) Stopping() {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
}

// Stop closes the listener, waiting up to a few seconds for requests in
// flight, and returns once its goroutines have ended. Safe to call twice,
// concurrently, and before Start.
func (s *Server) Stop() error { return s.life.Stop(s.shutdown) }

func (s *Server) shutdown() error {
	s.mu.Lock()
	srv := s.srv
	s.stopping = true
	s.mu.Unlock()
	s.stopAll()
	s.fmu.Lock()
	m := s.flight
	s.fmu.Unlock()
	if m != nil {
		<-m.done // bounded by Options.Timeout
	}
	if srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(ctx)
	if err != nil {
		err = srv.Close()
	}
	return err
}

func (s *Server) measure(r *http.Request) (status.Status, error) {
	return s.measureShared(r.Context())
}

// measureShared joins the measurement in progress, or starts one. The
// measurement runs on its own deadline (Options.Timeout), not on the
// context of whichever request started it, so a client that hangs up does
// not fail the others.
func (s *Server) measureShared(ctx context.Context) (status.Status, error) {
	s.fmu.Lock()
	m := s.flight
	if m == nil {
		m = &measurement{done: make(chan struct{})}
		if !s.life.Go(func() { s.runMeasurement(m) }) {
			s.fmu.Unlock()
			return status.Status{}, errors.New("status: the listener is stopped")
		}
		s.flight = m
	}
	s.fmu.Unlock()
	timer := time.NewTimer(s.opts.Timeout + time.Second)
	defer timer.Stop()
	select {
	case <-m.done:
		return m.st, m.err
	case <-ctx.Done():
		return status.Status{}, ctx.Err()
	case <-timer.C:
		return status.Status{}, fmt.Errorf("status: no measurement within %s", s.opts.Timeout+time.Second)
	}
}

// runMeasurement measures into m and ends the sharing of m.
func (s *Server) runMeasurement(m *measurement) {
	// The listener's own deadline (serviceutil.WithTimeout): a store that
	// does not answer within it failed.
	mctx, cancel := serviceutil.WithTimeout(context.Background(), s.opts.Timeout)
	m.st, m.err = s.src.Status(mctx)
	cancel()
	s.fmu.Lock()
	s.flight = nil
	s.fmu.Unlock()
	close(m.done)
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	st, err := s.measure(r)
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	write := func(code int, rd status.Readiness) {
		if r.Context().Value(foreignHost{}) != nil {
			rd.Reasons = nil
		}
		writeJSON(w, code, rd)
	}
	s.mu.Lock()
	stopping := s.stopping
	s.mu.Unlock()
	if stopping {
		write(http.StatusServiceUnavailable, status.Readiness{Reasons: []string{"shutting down"}})
		return
	}
	st, err := s.measure(r)
	if err != nil {
		write(http.StatusServiceUnavailable, status.Readiness{Reasons: []string{err.Error()}})
		return
	}
	rd := status.Ready(st, s.opts.StallThreshold, time.Now())
	code := http.StatusOK
	if !rd.Ready {
		code = http.StatusServiceUnavailable
	}
	write(code, rd)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
