// The check: how a leading publisher, idle or publishing, compares its
// stream with orisun's configuration and with what it published, every
// CheckInterval, with one stream info request, and sends the run back to
// the sync (sync.go) when the stream is not as the run left it.

package publisher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/stream"
)

// driftError says that the stream is not what this run left: its
// configuration is not orisun's in a way JetStream cannot undo in place, it
// is gone or of another epoch, it holds a sequence the run did not publish,
// or a publish found no stream or another stream. The run syncs again,
// which repairs it (see run.loop).
type driftError struct{ why string }

func (e *driftError) Error() string { return e.why }

// check compares the stream with orisun's configuration and, when idle
// (every publish acknowledged, next-1 the last), its last sequence with
// next-1: once per CheckInterval, and at once when StreamDrifted asked
// for it. A setting JetStream can change in place is put back here
// (applyConfig); anything else is a *driftError. A stream that does not
// answer is not checked this time: the next publish, or the next check,
// meets it.
//
// Each check is one stream info request; no store read.
func (r *run) check(ctx context.Context, idle bool, next uint64) error {
	asked := r.p.checkConfig.Swap(false)
	if idle {
		// A hint about the content waits for a moment when the stream's
		// last sequence is known (idle): a publisher woken by it passes
		// here busy first.
		asked = r.p.checkContent.Swap(false) || asked
	}
	if !asked && time.Since(r.checked) < r.p.cfg.CheckInterval {
		return nil
	}
	r.checked = time.Now()
	s, err := r.streamInfo(ctx)
	if err != nil {
		r.p.log.Debug("stream not checked", "err", err)
		return nil
	}
	name := stream.Name(r.p.cfg.Boundary)
	if s == nil {
		return &driftError{fmt.Sprintf("stream %s is gone (deleted): creating it again from the checkpoint", name)}
	}
	info := s.CachedInfo()
	if got := stream.Epoch(&info.Config); got != r.epoch {
		return &driftError{fmt.Sprintf("stream %s carries epoch %q in its metadata, not the boundary's %s: recreating it", name, got, r.epoch)}
	}
	why, err := r.applyConfig(ctx, info, r.want, false)
	if err != nil {
		return err
	}
	if why != "" {
		return &driftError{why + ": JetStream cannot change that in place, recreating the stream from the checkpoint"}
	}
	if idle {
		switch last := info.State.LastSeq; {
		case last > next-1:
			return &driftError{fmt.Sprintf("stream %s holds sequence %d, beyond %d, the last position this publisher published: "+
				"a message it did not publish; comparing the stream with the store", name, last, next-1)}
		case last < next-1:
			return &driftError{fmt.Sprintf("stream %s ends at sequence %d, before %d, the last position this publisher published "+
				"(deleted and created again?); comparing the stream with the store", name, last, next-1)}
		}
	}
	if idle && !r.putBackRefused {
		r.drifting = false
	}
	return nil
}

// untilCheck is how long until the next check is due.
func (r *run) untilCheck() time.Duration {
	return max(time.Until(r.checked.Add(r.p.cfg.CheckInterval)), time.Millisecond)
}

// explainPublish turns a publish that found no stream, another stream, or
// a stream whose last sequence was not the one expected, when the stream's
// configuration explains it (its subjects changed: nothing, or another
// stream, takes the boundary's subjects), into a *driftError naming the
// cause, so that the run syncs again at once and the sync puts the stream
// back. Any other error is returned as it is.
func (r *run) explainPublish(ctx context.Context, err error) error {
	var other *otherStreamError
	var apiErr *jetstream.APIError
	noStream := errors.Is(err, jetstream.ErrNoStreamResponse) || errors.As(err, &other)
	wrongLast := errors.As(err, &apiErr) && wrongLastSequence(apiErr)
	if !noStream && !wrongLast {
		return err
	}
	name := stream.Name(r.p.cfg.Boundary)
	ictx, cancel := context.WithTimeout(ctx, jsTimeout)
	s, serr := r.p.cfg.JS.Stream(ictx, name)
	cancel()
	switch {
	case errors.Is(serr, jetstream.ErrStreamNotFound):
		return &driftError{fmt.Sprintf("%v: stream %s is gone: creating it again from the checkpoint", err, name)}
	case serr != nil && noStream:
		return &driftError{fmt.Sprintf("%v: stream %s cannot be read (%v): checking it again", err, name, serr)}
	case serr != nil:
		return err
	}
	cfg := s.CachedInfo().Config
	if d := ConfigDrift(&cfg, &r.want); len(d) > 0 {
		return &driftError{fmt.Sprintf("%v: %s; putting it back", err, DescribeDrift(name, d))}
	}
	if noStream {
		return &driftError{fmt.Sprintf("%v: stream %s takes %s as it should; checking it again", err, name, list(cfg.Subjects))}
	}
	return err
}

// wrongLastSequence says whether JetStream refused a publish because the
// stream's last sequence was not the one expected: a replicated stream
// answers that with a code of its own.
func wrongLastSequence(e *jetstream.APIError) bool {
	return e.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || e.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// otherStreamError is a publish acknowledged by another stream than the
// boundary's: one that took the boundary's subjects after someone changed
// the stream's.
type otherStreamError struct {
	pos         uint64
	got, stream string
}

func (e *otherStreamError) Error() string {
	return fmt.Sprintf("position %d was acknowledged by stream %s, not %s: another stream takes the boundary's subjects "+
		"(the message is not in the boundary's stream; nothing is checkpointed)", e.pos, e.got, e.stream)
}

// StreamDrifted is what a node that reads every stream in one listing per
// poll interval hands each publisher: info is the boundary's stream as the
// listing found it (nil: not listed). It reports whether the running
// publisher should check its stream now, because info differs from the
// configuration of its last sync, carries another epoch, is missing, or,
// while the publisher is idle, ends elsewhere than at the last position it
// published; the publisher then checks at its next chance, and the caller
// wakes it. Like Behind it is a hint: the publisher reads its stream
// itself before it repairs anything, so a listing older than the
// publisher's last publish costs one stream info request, nothing more.
func (p *Publisher) StreamDrifted(info *jetstream.StreamInfo) bool {
	want := p.want.Load()
	if want == nil || p.progress.Load() == 0 {
		return false // it does not run
	}
	config := info == nil || stream.Epoch(&info.Config) != stream.Epoch(want) || len(ConfigDrift(&info.Config, want)) > 0 ||
		max(info.Config.Replicas, 1) != max(want.Replicas, 1)
	// idle is read before caughtUp, which is stored before idle is set.
	content := p.idle.Load() && info != nil && info.State.LastSeq != p.caughtUp.Load()
	if config {
		p.checkConfig.Store(true)
	}
	if content {
		p.checkContent.Store(true)
	}
	return config || content
}
