// The publisher's state for the status (I7): the state, its reason and
// since when, the configuration warning, how long it has gone without
// progress, and what a pause means to an operator.

package publisher

import (
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/status"
)

// Status is a snapshot of a publisher's state, measured, never assumed (I7).
type Status struct {
	State  status.State `json:"state"`
	Reason string       `json:"reason"`
	// Since is when the publisher entered State.
	Since time.Time `json:"since"`
	// Warning is a configuration this node's publisher could not apply to
	// the stream, with JetStream's reason (a replica count it refused, a
	// drifted setting it refused to put back); the publisher still
	// publishes if it can. Empty when none.
	Warning string `json:"warning,omitempty"`
}

// Status returns the current state.
func (p *Publisher) Status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}

// SetStandby records that another holder has the lease (called by the lease
// loop while this node waits).
func (p *Publisher) SetStandby(reason string) { p.setState(status.StateStandby, reason, nil) }

// SetStalled records that the publisher cannot run for a reason that is not
// another leader (the lease cannot be acquired because the store fails).
func (p *Publisher) SetStalled(reason string) { p.setState(status.StateStalled, reason, nil) }

// setState changes the state. A change of state is logged once, with its
// reason, at info (warn for paused and stalled); a new reason within the
// same state (publishing ↔ caught up, another error while stalled) only at
// debug, so a retry loop or a busy boundary does not flood the log.
func (p *Publisher) setState(s status.State, reason string, err error) {
	p.mu.Lock()
	stateChanged := p.state.State != s
	changed := stateChanged || p.state.Reason != reason
	if changed {
		since := p.state.Since
		if stateChanged {
			since = time.Now().UTC()
		}
		p.state = Status{State: s, Reason: reason, Since: since, Warning: p.state.Warning}
	}
	p.mu.Unlock()
	switch {
	case !changed:
	case !stateChanged:
		p.log.Debug("publisher "+string(s), "reason", reason, "err", err)
	case s == status.StateStalled || s == status.StatePaused:
		p.log.Warn("publisher "+string(s), "reason", reason, "err", err)
	default:
		p.log.Info("publisher "+string(s), "reason", reason)
	}
}

// troubled reports whether the publisher is paused or stalled.
func (p *Publisher) troubled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state.State == status.StatePaused || p.state.State == status.StateStalled
}

// setWarning records the stream configuration warning ("" clears it) and
// reports whether it changed.
func (p *Publisher) setWarning(w string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state.Warning == w {
		return false
	}
	p.state.Warning = w
	return true
}

func (p *Publisher) markProgress() { p.progress.Store(time.Now().UnixNano()) }

// Stalled reports, at now, how long the running publisher has gone without
// progress (no batch acknowledged, not caught up) and why: its stalled
// reason, or what it was doing when it stopped moving (a call that hangs
// leaves the state as it was). It is 0 when the publisher does not run,
// waits caught up, or is paused: JetStream refusing for its own limits
// refuses every node alike, so another leader would do no better. The
// node's lease runner uses it to step down on a shared NATS.
func (p *Publisher) Stalled(now time.Time) (time.Duration, string) {
	since := p.progress.Load()
	if since == 0 || p.idle.Load() {
		return 0, ""
	}
	st := p.Status()
	if st.State == status.StatePaused {
		return 0, ""
	}
	why := st.Reason
	if st.State != status.StateStalled {
		why = "no batch acknowledged (last state: " + string(st.State) + ", " + st.Reason + ")"
	}
	return max(0, now.Sub(time.Unix(0, since))), why
}

// pausedReason says what JetStream refused and what an operator can do.
func pausedReason(err error) string {
	return err.Error() + " (JetStream refuses to store more: it needs memory (and, for a file store, disk) for every " +
		"boundary's stream and for whatever else the server holds; orisun's streams discard old messages at their limits " +
		"(a changed discard policy or limit is put back within ORISUN_POLL_INTERVAL), so lower " +
		"ORISUN_NATS_EVENT_STREAM_MAX_BYTES or give the server more resources; nothing is skipped, the publisher retries)"
}

// isPaused reports whether JetStream refuses for a reason of its own limits
// (a full stream with discard-new, until the check puts the discard policy
// back, or the server's memory or storage is exhausted), as opposed to a
// failure of orisun or the store.
func isPaused(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case 10077, // stream store failed: maximum messages or bytes exceeded
		10028, // insufficient memory resources
		10047, // insufficient storage resources
		10023: // insufficient resources
		return true
	}
	return false
}
