// The checkpoint: how a run records the last acknowledged position in the
// store, monotonic and fenced by the lease term (I3), in the background of
// the pipeline (the checkpointer), and once more when the run ends.

package publisher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/startstop"
)

// checkpoint writes the checkpoint of an acknowledged position. A stale
// lease is final for this run; another failure is retried with the next
// batch (the write is monotonic, so a later one covers this one).
func (r *run) checkpoint(ctx context.Context, pos uint64) error {
	if err := r.saveCheckpoint(ctx, pos); err != nil {
		return err
	}
	r.saved = max(r.saved, pos)
	return nil
}

// saveCheckpoint writes the checkpoint, leaving r.saved alone: the
// checkpointer calls it from its own goroutine.
func (r *run) saveCheckpoint(ctx context.Context, pos uint64) error {
	p := r.p
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := p.cfg.Store.SaveCheckpoint(wctx, p.cfg.Boundary, *r.lease.Load(), pos)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, event.ErrLeaseLost):
		return fmt.Errorf("checkpoint %d refused: %w", pos, err)
	default:
		return fmt.Errorf("write checkpoint %d: %w", pos, err)
	}
}

// checkpointer writes the checkpoints of one drain in the background, so
// publishing never waits for a checkpoint's commit (a WAL flush on
// PostgreSQL, a turn of the single writer on SQLite): while one is written,
// the positions acknowledged meanwhile wait and go in the next write,
// together. Only acknowledged positions are handed to it, and the store
// keeps the maximum of what it is given (I3). Before, every fully
// acknowledged batch wrote its checkpoint in the publishing loop, and the
// events committed meanwhile waited behind that write.
//
// Its goroutine is its life's; stop ends it (quit) after it wrote what was
// handed over. A failed write ends it at once.
type checkpointer struct {
	r *run
	// ctx is the writes' context; quit ends the goroutine.
	ctx  context.Context
	life startstop.Base
	quit context.CancelFunc
	// kick has room for one signal: positions were handed over.
	kick chan struct{}
	// failed is closed on the first failure, err is that failure.
	failed chan struct{}

	mu   sync.Mutex
	want uint64 // the last acknowledged position handed over
	err  error

	// written is the last position written; the goroutine's until it
	// ends.
	written uint64
}

// startCheckpointer starts the checkpointer of one drain; its writes run
// under ctx.
func (r *run) startCheckpointer(ctx context.Context) *checkpointer {
	c := &checkpointer{r: r, ctx: ctx, kick: make(chan struct{}, 1), failed: make(chan struct{})}
	_ = c.life.Start(ctx, c.start, c.halt) // it cannot fail
	return c
}

func (c *checkpointer) start(context.Context) error {
	quit, cancel := context.WithCancel(context.Background())
	c.quit = cancel
	c.life.Go(func() { c.loop(quit) })
	return nil
}

func (c *checkpointer) halt() error {
	if c.quit != nil {
		c.quit()
	}
	return nil
}

// save hands over an acknowledged position; it never waits.
func (c *checkpointer) save(pos uint64) {
	c.mu.Lock()
	c.want = max(c.want, pos)
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// failure is the checkpointer's first failure, nil while there is none.
func (c *checkpointer) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *checkpointer) loop(quit context.Context) {
	for {
		select {
		case <-c.kick:
			if !c.write() {
				return
			}
		case <-quit.Done():
			c.write() // what was handed over before the stop
			return
		}
	}
}

// write writes the last position handed over, if it is new; false once a
// write failed (nothing is written after a failure: the drain ends).
func (c *checkpointer) write() bool {
	c.mu.Lock()
	pos, err := c.want, c.err
	c.mu.Unlock()
	if err != nil {
		return false
	}
	if pos <= c.written {
		return true
	}
	if err := c.r.saveCheckpoint(c.ctx, pos); err != nil {
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
		close(c.failed)
		return false
	}
	c.written = pos
	return true
}

// stop writes what was handed over and not yet written, ends the
// goroutine, and returns the first failure.
func (c *checkpointer) stop() error {
	_ = c.life.Stop(c.halt)
	c.r.saved = max(c.r.saved, c.written)
	return c.failure()
}

// finalCheckpoint saves what was acknowledged but not yet checkpointed, so a
// clean stop leaves the checkpoint at the stream's last sequence.
func (r *run) finalCheckpoint() {
	if r.acked > r.saved {
		if err := r.checkpoint(context.Background(), r.acked); err != nil {
			r.p.log.Warn("final checkpoint not written", "position", r.acked, "err", err)
		}
	}
}
