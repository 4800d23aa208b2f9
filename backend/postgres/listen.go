package postgres

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orisun-io/orisun/internal/serviceutil"
)

// listen keeps a LISTEN connection open until ctx ends, calling the
// OnAppend callbacks with the boundary of every notification of a commit,
// the OnLeaseReleased callbacks with that of every released lease and the
// OnStaged callbacks with that of every committed enqueue:
// commits and releases of other stores (other nodes) wake this one without
// waiting for a poll. On a
// lost connection it reconnects with exponential back-off between
// ListenReconnectMin and ListenReconnectMax, and logs once per change of
// state, not once per attempt. Notifications sent while it was away are
// lost, so after a reconnect it wakes every boundary once: a hint too many
// is harmless, one too few costs a poll interval.
func (s *Store) listen(ctx context.Context) {
	defer close(s.listenDone)
	backoff := s.cfg.ListenReconnectMin
	connectedOnce := false
	down := false // a loss has been logged and not yet followed by a reconnect
	for {
		conn, started, err := s.listenConnect(ctx)
		if ctx.Err() != nil {
			if conn != nil {
				closeQuietly(conn)
			}
			return
		}
		if err != nil {
			if !down {
				s.log.Warn("postgres LISTEN connection unavailable; reconnecting with back-off", "err", err)
				down = true
			}
			if !serviceutil.Sleep(ctx, backoff) {
				return
			}
			backoff = nextBackoff(backoff, s.cfg.ListenReconnectMax)
			continue
		}
		s.listens.Add(1)
		connectedAt := time.Now()
		if connectedOnce {
			s.log.Info("postgres LISTEN connection restored")
			s.wakeAll(ctx)
		} else {
			s.log.Debug("postgres LISTEN connection open", "channel", notifyChannel)
		}
		connectedOnce, down = true, false

		err = s.receive(ctx, conn, started)
		closeQuietly(conn)
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("postgres LISTEN connection lost; reconnecting", "err", err)
		down = true
		// A connection that held for a while starts the back-off afresh;
		// one that keeps failing right after connecting backs off further.
		if time.Since(connectedAt) >= s.cfg.ListenReconnectMax {
			backoff = s.cfg.ListenReconnectMin
		}
		if !serviceutil.Sleep(ctx, backoff) {
			return
		}
		backoff = nextBackoff(backoff, s.cfg.ListenReconnectMax)
	}
}

// nextBackoff doubles d, up to limit.
func nextBackoff(d, limit time.Duration) time.Duration {
	return min(max(2*d, time.Millisecond), limit)
}

// listenConnect opens the LISTEN connection and subscribes it, and reads
// the server's start time: the pool's connections to an earlier run of it
// (dead, not yet closed by the pool) are not this run's (Store.own).
func (s *Store) listenConnect(ctx context.Context) (*pgx.Conn, int64, error) {
	conn, err := pgx.ConnectConfig(ctx, s.listenCfg)
	if err != nil {
		return nil, 0, translate("listen: connect", err)
	}
	started, err := serverStarted(ctx, conn)
	if err == nil {
		_, err = conn.Exec(ctx, sqlListen)
		err = translate("listen", err)
	}
	if err != nil {
		closeQuietly(conn)
		return nil, 0, err
	}
	return conn, started, nil
}

// receive delivers notifications until the connection fails or ctx ends.
func (s *Store) receive(ctx context.Context, conn *pgx.Conn, started int64) error {
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return translate("listen: wait for notification", err)
		}
		s.notifications.Add(1)
		switch {
		case n.Payload == "":
		case n.Channel == notifyChannel && s.own.has(backendKey{started, n.PID}):
			// A commit of this store's: its callbacks ran after it.
			s.ownNotifications.Add(1)
		case n.Channel == notifyChannel:
			s.notify(n.Payload)
		case n.Channel == leaseChannel:
			s.releases.Notify(n.Payload)
		case n.Channel == stagedChannel:
			s.staged.Notify(n.Payload)
		}
	}
}

// wakeAll calls the callbacks once for every boundary.
func (s *Store) wakeAll(ctx context.Context) {
	bs, err := s.Boundaries(ctx)
	if err != nil {
		s.log.Debug("wake every boundary after a LISTEN reconnect", "err", err)
		return
	}
	for _, b := range bs {
		s.notify(b.Name)
		s.staged.Notify(b.Name)
	}
}

func closeQuietly(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// backendKey names a server process: the server's start time and the
// process id, which a later run of the server reuses.
type backendKey struct {
	started int64 // Unix microseconds
	pid     uint32
}

// serverStarted reads the start time of the server conn is connected to,
// in Unix microseconds (a number: no DateStyle to parse), within the
// connect timeout.
func serverStarted(ctx context.Context, conn *pgx.Conn) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, defaultConnectTimeout)
	defer cancel()
	var t int64
	if err := conn.QueryRow(ctx, sqlServerStarted).Scan(&t); err != nil {
		return 0, translate("read the server's start time", err)
	}
	return t, nil
}

// backendPIDs is the set of the server processes of the pool's open
// connections (Store.own). Each is counted: two connections may name the
// same process while the pool has not yet closed a dead one.
type backendPIDs struct {
	mu    sync.Mutex
	conns map[*pgx.Conn]backendKey
	n     map[backendKey]int
}

func newBackendPIDs() *backendPIDs {
	return &backendPIDs{conns: map[*pgx.Conn]backendKey{}, n: map[backendKey]int{}}
}

func (b *backendPIDs) add(c *pgx.Conn, k backendKey) {
	b.mu.Lock()
	b.conns[c] = k
	b.n[k]++
	b.mu.Unlock()
}

// remove is the pool's BeforeClose.
func (b *backendPIDs) remove(c *pgx.Conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k, ok := b.conns[c]
	if !ok {
		return
	}
	delete(b.conns, c)
	if b.n[k]--; b.n[k] <= 0 {
		delete(b.n, k)
	}
}

func (b *backendPIDs) has(k backendKey) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n[k] > 0
}
