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
		conn, err := s.listenConnect(ctx)
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

		err = s.receive(ctx, conn)
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

// listenConnect opens the LISTEN connection and subscribes it.
func (s *Store) listenConnect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, s.listenCfg)
	if err != nil {
		return nil, translate("listen: connect", err)
	}
	if _, err := conn.Exec(ctx, sqlListen); err != nil {
		closeQuietly(conn)
		return nil, translate("listen", err)
	}
	return conn, nil
}

// receive delivers notifications until the connection fails or ctx ends.
func (s *Store) receive(ctx context.Context, conn *pgx.Conn) error {
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return translate("listen: wait for notification", err)
		}
		s.notifications.Add(1)
		switch {
		case n.Payload == "":
		case n.Channel == notifyChannel && s.own.has(n.PID):
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

// backendPIDs is a set of server process ids: those of the pool's open
// connections (Store.own). Each is counted: a connection the server ended
// stays in the pool until the pool notices, and a new one may meanwhile
// get its process id; the first one's removal must not take the second's.
type backendPIDs struct {
	mu sync.Mutex
	m  map[uint32]int
}

func (b *backendPIDs) add(pid uint32) {
	b.mu.Lock()
	b.m[pid]++
	b.mu.Unlock()
}

func (b *backendPIDs) remove(pid uint32) {
	b.mu.Lock()
	if b.m[pid]--; b.m[pid] <= 0 {
		delete(b.m, pid)
	}
	b.mu.Unlock()
}

func (b *backendPIDs) has(pid uint32) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.m[pid]
	return ok
}
