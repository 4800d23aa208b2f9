package orisun

// The memory budget of the event streams. Every boundary's stream is a
// memory stream, and JetStream reserves its max bytes
// (ORISUN_NATS_EVENT_STREAM_MAX_BYTES) out of its memory budget when the
// stream is created, refusing a stream that does not fit. The publisher
// creates the stream when it first leads the boundary, after the boundary
// was accepted: without this check a boundary beyond the budget was
// created, and its publisher then sat paused for good. So the budget is
// checked when the boundary is created (the API, Node.CreateBoundary and
// ORISUN_BOUNDARIES at start), counting the memory the existing streams
// reserve and the memory promised to boundaries whose streams do not exist
// yet (docs/design.md §12, docs/security.md "Limits").

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/serviceutil"
	"github.com/orisun-io/orisun/stream"
)

// memoryBudget is what the streams may reserve and what they do.
type memoryBudget struct {
	// budget is the most the memory streams may reserve; reserved what
	// the existing streams (streams of them) reserve.
	budget, reserved int64
	streams          int
	// waiting are the boundaries without a stream yet: each will reserve
	// perStream when its publisher creates it.
	waiting int
	// perStream is what one new boundary's stream reserves (its max bytes,
	// times its replicas where the account counts them).
	perStream int64
	// of names the budget and the variable (or setting) that sets it.
	of string
	// maxStream is the account's limit of one memory stream (0: none).
	maxStream int64
}

// checkStreamMemory refuses a new boundary whose stream would not get its
// memory, with an error (event.ErrTooLarge) that names the budget, what is
// reserved and the variables to change. It is called under createMu, with
// the boundary not yet in the store. Streams without a byte limit
// (ORISUN_NATS_EVENT_STREAM_MAX_BYTES=-1) reserve nothing, and where the
// budget cannot be read (an external NATS whose account has no memory
// limit, whose servers' budgets a client cannot see; an embedded cluster
// whose streams have fewer replicas than it has servers, so that they
// spread over servers this node does not see) nothing is checked:
// JetStream refuses the stream when the publisher creates it, and the
// publisher is paused with that reason. An embedded cluster whose streams
// have a replica on every server (ORISUN_NATS_STREAM_REPLICAS equal to its
// size, as docker-compose.yml runs it) is checked as a single server is:
// each server holds every stream.
func (n *Node) checkStreamMemory(ctx context.Context, store backend.Store, name string) error {
	if n.cfg.EventStreamMaxBytes <= 0 {
		return nil
	}
	// Bounded apart from the creation: a JetStream that does not answer
	// leaves the creation its own time.
	cctx, cancel := serviceutil.WithTimeout(ctx, budgetTimeout)
	defer cancel()
	b, ok, err := n.memoryBudget(cctx, store)
	if err != nil {
		// Not refused for a check that could not be made: JetStream still
		// refuses a stream that does not fit, and the publisher says so.
		n.log.Warn("the JetStream memory budget could not be read: the boundary is created unchecked", "boundary", name, "err", err)
		return nil
	}
	if !ok {
		return nil
	}
	if b.maxStream > 0 && n.cfg.EventStreamMaxBytes > b.maxStream {
		return fmt.Errorf("%w: boundary %q refused: its stream would reserve %s of JetStream memory (ORISUN_NATS_EVENT_STREAM_MAX_BYTES), "+
			"above the account's limit of one memory stream, %s (memory_max_stream_bytes); lower ORISUN_NATS_EVENT_STREAM_MAX_BYTES",
			event.ErrTooLarge, name, bytesText(n.cfg.EventStreamMaxBytes), bytesText(b.maxStream))
	}
	promised := int64(b.waiting) * b.perStream
	if b.reserved+promised+b.perStream <= b.budget {
		return nil
	}
	free := max(b.budget-b.reserved-promised, 0)
	return fmt.Errorf("%w: boundary %q refused: its stream would reserve %s of JetStream memory (ORISUN_NATS_EVENT_STREAM_MAX_BYTES), "+
		"but of the budget of %s (%s) %s is reserved by the %d existing streams and %s is promised "+
		"to the accepted boundaries whose streams are not created yet (%d), leaving %s; "+
		"%s, or raise %s to at least %s",
		event.ErrTooLarge, name, bytesText(b.perStream), bytesText(b.budget), b.of, bytesText(b.reserved), b.streams,
		bytesText(promised), b.waiting, bytesText(free), n.lowerStreams(b), raiseWhat(b.of), bytesText(b.reserved+promised+b.perStream))
}

// lowerStreams says how far ORISUN_NATS_EVENT_STREAM_MAX_BYTES must come
// down for every boundary's stream, the new one's included, to fit the
// budget beside what other streams reserve (orisun's existing ones taking
// the new limit when their publishers put it back or create them again):
// what a node too small for the default stream (less than about 683 MiB
// of memory, or of GOMEMLIMIT, at zero configuration) must set.
func (n *Node) lowerStreams(b memoryBudget) string {
	const what = "lower ORISUN_NATS_EVENT_STREAM_MAX_BYTES"
	perReplica := max(b.perStream/max(n.cfg.EventStreamMaxBytes, 1), 1)
	others := max(b.reserved-int64(b.streams)*b.perStream, 0)
	fit := (b.budget - others) / int64(b.streams+b.waiting+1) / perReplica
	if fit < 1<<20 {
		return what
	}
	fit -= fit % (1 << 20) // whole MiB
	return fmt.Sprintf("%s to at most %s (every boundary's stream then fits)", what, bytesText(fit))
}

// budgetTimeout bounds the reads of the memory check.
const budgetTimeout = 5 * time.Second

// raiseWhat is the variable or setting that raises the budget named of.
func raiseWhat(of string) string {
	if strings.HasPrefix(of, "ORISUN_NATS_MAX_MEMORY") {
		return "ORISUN_NATS_MAX_MEMORY"
	}
	return "the account's JetStream memory limit"
}

// memoryBudget reads the budget and what is reserved of it; ok is false
// where it cannot be known (see checkStreamMemory).
func (n *Node) memoryBudget(ctx context.Context, store backend.Store) (memoryBudget, bool, error) {
	if n.ns != nil && n.cfg.NATSClusterName != "" {
		// Each server reserves the max bytes of every stream it holds a
		// replica of, and Memory counts every stream of the cluster once:
		// exact when every server holds every stream. Until the cluster
		// has a leader this server may not know every stream yet.
		size, led, err := n.ns.JetStreamClusterSize()
		if err != nil || !led || size != max(n.cfg.StreamReplicas, 1) {
			return memoryBudget{}, false, err
		}
	}
	if n.ns != nil {
		// The embedded server counts its streams and their reservations
		// in one step, in process, and only orisun's own connections
		// create streams there: every boundary without a stream will
		// reserve one.
		b := memoryBudget{perStream: n.cfg.EventStreamMaxBytes, of: "ORISUN_NATS_MAX_MEMORY"}
		if n.cfg.NATSMaxMemory == 0 {
			b.of += " unset: JetStream's default, 75% of the host's memory or of GOMEMLIMIT"
		}
		count, err := n.boundaryCount(ctx, store)
		if err != nil {
			return b, false, err
		}
		b.budget, b.reserved, b.streams, err = n.ns.Memory()
		b.waiting = max(count-b.streams, 0)
		return b, err == nil, err
	}
	all, err := store.Boundaries(ctx)
	if err != nil {
		return memoryBudget{}, false, fmt.Errorf("list boundaries: %w", err)
	}
	// An external NATS: is there an account limit to check at all?
	b, ok, err := n.accountBudget(ctx)
	if !ok || err != nil {
		return b, false, err
	}
	// Which boundaries have a stream (the account may hold other
	// streams), and what the streams reserve: a stream created between
	// the two reads would be counted twice (as reserved, and as waiting
	// for its stream), so the names are read again, and the reads
	// repeated (a few times) until no stream came.
	var have map[string]bool
	for try := 0; ; try++ {
		if have, err = n.streamsOf(ctx); err != nil {
			return b, false, err
		}
		if b, ok, err = n.accountBudget(ctx); !ok || err != nil {
			return b, false, err
		}
		again, err := n.streamsOf(ctx)
		if err != nil {
			return b, false, err
		}
		if len(again) == len(have) || try == 2 {
			break // else counted twice: conservative, after the last try
		}
	}
	b.streams = len(have)
	for _, bd := range all {
		if !have[bd.Name] {
			b.waiting++
		}
	}
	return b, true, nil
}

// boundaryCount is how many boundaries exist. Once the node serves, every
// boundary it knows has a runner (createBoundary starts it under createMu,
// and the boundaries other nodes create are adopted within a poll
// interval), so it counts them without reading every boundary of the store
// for each creation; during start it reads the store.
func (n *Node) boundaryCount(ctx context.Context, store backend.Store) (int, error) {
	if n.serving.Load() {
		n.rmu.RLock()
		defer n.rmu.RUnlock()
		return len(n.runners), nil
	}
	all, err := store.Boundaries(ctx)
	if err != nil {
		return 0, fmt.Errorf("list boundaries: %w", err)
	}
	return len(all), nil
}

// streamsOf lists the boundaries that have a stream.
func (n *Node) streamsOf(ctx context.Context) (map[string]bool, error) {
	have := map[string]bool{}
	l := n.js.StreamNames(ctx)
	for name := range l.Name() {
		if b, ok := strings.CutPrefix(name, stream.Name("")); ok {
			have[b] = true
		}
	}
	if err := l.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return nil, fmt.Errorf("list streams: %w", err)
	}
	return have, nil
}

// accountBudget reads the JetStream account's memory limit, what its
// streams reserve, and what one stream reserves of it (every replica where
// the limit has no replica tiers); ok is false when the account has no
// limit to check.
func (n *Node) accountBudget(ctx context.Context) (b memoryBudget, ok bool, err error) {
	replicas := max(n.cfg.StreamReplicas, 1)
	b.perStream = n.cfg.EventStreamMaxBytes
	info, err := n.js.AccountInfo(ctx)
	if err != nil {
		return b, false, fmt.Errorf("account info: %w", err)
	}
	t := info.Tier
	if len(info.Tiers) > 0 {
		if t, ok = info.Tiers[fmt.Sprintf("R%d", replicas)]; !ok {
			return b, false, nil
		}
	} else {
		b.perStream *= int64(replicas)
	}
	b.maxStream = t.Limits.MemoryMaxStreamBytes
	if t.Limits.MaxMemory < 0 {
		// No account limit; the servers' own are not visible to a client.
		b.budget = math.MaxInt64
		return b, b.maxStream > 0, nil
	}
	b.budget, b.reserved = t.Limits.MaxMemory, int64(t.ReservedMemory)
	b.of = "the JetStream account's max_memory on the NATS of ORISUN_NATS_URL"
	return b, true, nil
}

// bytesText writes a byte count for people: 512 MiB (536870912 bytes).
func bytesText(v int64) string {
	const mib = 1 << 20
	if v >= mib && v%mib == 0 {
		return fmt.Sprintf("%d MiB (%d bytes)", v/mib, v)
	}
	if v >= mib {
		return fmt.Sprintf("%.1f MiB (%d bytes)", float64(v)/mib, v)
	}
	return fmt.Sprintf("%d bytes", v)
}
