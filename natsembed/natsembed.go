// Package natsembed runs the NATS server with JetStream inside the orisun
// process. Event streams are memory streams (the store is the source of
// truth); the server's store directory only holds JetStream's own state.
//
// Lifecycle: New → Start (fails unless the server is ready for connections)
// → Connect (in-process connections, no TCP) → Stop (Shutdown and wait).
// Stop is safe to call twice and before Start.
package natsembed

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
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
	Logger       *slog.Logger
}

// Server is an embedded NATS server with JetStream.
type Server struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	ns      *server.Server
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
		// The embedded server's own logging stays off; orisun logs what
		// matters through slog.
		NoLog: true,
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("natsembed: configure server: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(s.cfg.ReadyTimeout) {
		ns.Shutdown()
		ns.WaitForShutdown()
		return fmt.Errorf("natsembed: server not ready for connections on %s:%d within %s (is the port in use?)",
			s.cfg.Host, s.cfg.Port, s.cfg.ReadyTimeout)
	}
	s.ns = ns
	s.log.Info("embedded NATS server ready", "url", ns.ClientURL(), "store_dir", s.cfg.StoreDir)
	return nil
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

// Connect opens an in-process client connection.
func (s *Server) Connect(name string, opts ...nats.Option) (*nats.Conn, error) {
	s.mu.Lock()
	ns := s.ns
	s.mu.Unlock()
	if ns == nil {
		return nil, errors.New("natsembed: server not started")
	}
	all := append([]nats.Option{
		nats.InProcessServer(ns),
		nats.Name(name),
		nats.MaxReconnects(-1),
	}, opts...)
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
	s.stopped = true
	s.mu.Unlock()
	if ns != nil {
		ns.Shutdown()
		ns.WaitForShutdown()
	}
}
