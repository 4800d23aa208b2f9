package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/orisun-io/orisun/backend/internal/sqlstore"
)

// pruneAfter is how many TTLs a node may stay silent before its row is
// deleted: far beyond being counted (one TTL), so a pruned row never
// changes a count.
const pruneAfter = 100

// Heartbeat records that holder (a process of the node named nodeID) is
// alive, in the database's clock, and returns how many nodes are live:
// those whose last heartbeat is younger than ttl, this one included. The
// holder is unique to the process (the node id plus a random instance
// part), so twin names the holder of another live process that uses the
// same node id: one that has beaten within ttl and after this process's
// first heartbeat ("" when none). A node's previous process, dead, stopped
// beating before this one began and is never named. alive names those of
// gone (holders the caller believes ended: the earlier processes its data
// directory's lock file names) that have beaten after this process's
// first heartbeat, which came after it took the lock: they still run, so
// the lock file was copied with the directory (a cloned volume keeps its
// inode numbers, docs/design.md §9). It also deletes the rows of nodes
// silent for a hundred TTLs (nodes that died without removing theirs).
// Placement calls it every third of the lease TTL.
func (s *Store) Heartbeat(ctx context.Context, holder, nodeID string, gone []string, ttl time.Duration) (live int, twin string, alive []string, err error) {
	op := fmt.Sprintf("heartbeat of node %q", holder)
	if err := sqlstore.CheckLeaseArgs(reads{s}, holder, ttl); err != nil {
		return 0, "", nil, fmt.Errorf("postgres: %s: %w", op, err)
	}
	if gone == nil {
		gone = []string{}
	}
	if err := s.pool.QueryRow(ctx, sqlHeartbeat, holder, nodeID, ttl.Microseconds(), gone).Scan(&live, &twin, &alive); err != nil {
		return 0, "", nil, s.translate(op, err)
	}
	if _, err := s.pool.Exec(ctx, sqlPruneNodes, (pruneAfter * ttl).Microseconds()); err != nil {
		return 0, "", nil, s.translate("prune silent nodes", err)
	}
	return live, twin, alive, nil
}

// RemoveNode deletes holder's heartbeat row: a node stopping cleanly stops
// being counted at once, so the others take its share without waiting a
// TTL.
func (s *Store) RemoveNode(ctx context.Context, holder string) error {
	op := fmt.Sprintf("remove node %q", holder)
	if s.isClosed() {
		return errClosed(op)
	}
	if _, err := s.pool.Exec(ctx, sqlRemoveNode, holder); err != nil {
		return s.translate(op, err)
	}
	return nil
}
