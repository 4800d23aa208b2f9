package status

import (
	"context"
	"fmt"
	"time"
)

// State is a boundary's publisher state on a node (docs/design.md §8).
type State string

const (
	// StateLeading: this node holds the lease and publishes.
	StateLeading State = "leading"
	// StateStandby: another node holds the lease, or this one is stopped.
	StateStandby State = "standby"
	// StatePaused: JetStream refuses for its own limits; retrying.
	StatePaused State = "paused"
	// StateStalled: the publisher cannot make progress; Reason says why.
	StateStalled State = "stalled"
)

// Status is what a node reports (docs/design.md §8): measured, never assumed (I7).
type Status struct {
	NodeID string `json:"node_id"`
	// LeaseHolder is this process's name as a lease holder: the node id
	// and a part unique to the process.
	LeaseHolder string `json:"lease_holder"`
	Version     string `json:"version"`
	// Time is when the measurement was taken, in the node's clock.
	Time time.Time `json:"time"`
	// Settled is true when every boundary's published position equals its
	// head, both read during this measurement, no boundary's stream holds a
	// sequence beyond its head or of another epoch, nothing failed to be
	// measured, and no kind of store work is failing (Store.OK).
	Settled    bool             `json:"settled"`
	Store      Health           `json:"store"`
	NATS       Health           `json:"nats"`
	Boundaries []BoundaryStatus `json:"boundaries"`
	// Placement is this node's view of boundary placement; absent when
	// placement is off (SQLite, or a NATS of its own).
	Placement *Placement `json:"placement,omitempty"`
	// Warning is a problem of the node as a whole, with what to do: another
	// live process uses this node's id (a copied data directory). Absent
	// when none.
	Warning string `json:"warning,omitempty"`
}

// Placement is how a node spreads the boundaries' leases with the others.
type Placement struct {
	// LiveNodes is how many nodes have a heartbeat in the store fresher
	// than one lease TTL, this one included (0: the heartbeat failed).
	LiveNodes int `json:"live_nodes"`
	// FairShare is ceil(boundaries / live nodes) (0: unknown).
	FairShare int `json:"fair_share"`
	// Leading is how many boundaries this node leads.
	Leading int `json:"leading"`
}

// Health is whether a dependency answered during the measurement.
type Health struct {
	OK bool `json:"ok"`
	// Kind names it: the backend (sqlite, postgres) or the NATS mode.
	Kind string `json:"kind,omitempty"`
	// Error is why it did not answer, or what it fails to do: the store
	// may answer reads while its writes fail (a full disk, a read-only
	// file system), and then says which writes fail, since when, and the
	// last error.
	Error string `json:"error,omitempty"`
	// Since is when the failure began, as far as the node has seen it
	// (absent when OK, or when only this measurement saw it).
	Since time.Time `json:"since,omitzero"`
}

// BoundaryStatus is one boundary's relay state.
type BoundaryStatus struct {
	Name  string `json:"name"`
	Epoch string `json:"epoch"`
	// Head is the last committed position; Published the publisher's
	// checkpoint (every position up to it is in the stream or was).
	Head      uint64 `json:"head"`
	Published uint64 `json:"published"`
	// StreamFirst and StreamLast are the stream's first and last sequence
	// (0 when the stream is missing); StreamMsgs and StreamBytes what it
	// holds.
	StreamFirst uint64 `json:"stream_first"`
	StreamLast  uint64 `json:"stream_last"`
	StreamMsgs  uint64 `json:"stream_msgs"`
	StreamBytes uint64 `json:"stream_bytes"`
	// StreamReplicas is the stream's replica count as JetStream reports
	// it (0 when the stream is missing).
	StreamReplicas int `json:"stream_replicas"`
	// LagEvents is head - published.
	LagEvents uint64 `json:"lag_events"`
	// LagSeconds is the age of the oldest unpublished event (0 when none),
	// from its commit time in the store to this node's clock.
	LagSeconds float64 `json:"lag_seconds"`
	// State, Reason and Since are this node's publisher's: leading,
	// standby, paused or stalled, why, and since when.
	State  State     `json:"state"`
	Reason string    `json:"reason"`
	Since  time.Time `json:"since,omitzero"`
	// Warning is what is wrong with the boundary's stream: measured for
	// this report, a sequence beyond the head or another epoch (the status
	// is then not settled) or a configuration that is not orisun's; and
	// what this node's publisher could not put back or apply (a replica
	// count, a setting JetStream refused), with the reason. Empty when
	// nothing is.
	Warning string `json:"warning,omitempty"`
	// LeaseHolder and LeaseTerm describe the current lease (any node's);
	// LeaseExpires is its expiry in the store's clock.
	LeaseHolder  string    `json:"lease_holder"`
	LeaseTerm    uint64    `json:"lease_term"`
	LeaseExpires time.Time `json:"lease_expires,omitzero"`
	// Subscriptions of this node by phase, and how often a live one went
	// back to the store.
	SubsCatchingUp int64 `json:"subscriptions_catching_up"`
	SubsLive       int64 `json:"subscriptions_live"`
	SubsFallBacks  int64 `json:"subscription_fall_backs"`
	// Staged counts the events that application transactions enqueued
	// (orisun_enqueue, PostgreSQL) and committed, not yet moved into the
	// log by the lease holder; StagedSeconds is the age of the oldest of
	// them (0 when none). A growing count is a mover that is behind.
	// SetAside counts the enqueued events the mover set aside (their id is
	// in the log with other content, or they are over the limits row's
	// max_event_bytes lowered since), SetAsideReason is the latest one's.
	// MoveError is this node's mover's last error while its moves fail.
	// All absent on SQLite (docs/outbox.md).
	Staged         uint64  `json:"staged,omitempty"`
	StagedSeconds  float64 `json:"staged_seconds,omitempty"`
	SetAside       uint64  `json:"set_aside,omitempty"`
	SetAsideReason string  `json:"set_aside_reason,omitempty"`
	MoveError      string  `json:"move_error,omitempty"`
	// Error is set when the store's figures of the boundary (head,
	// published, lag, lease) could not be measured; they are then zero, not
	// guessed. StreamError is the same for the stream's figures.
	Error       string `json:"error,omitempty"`
	StreamError string `json:"stream_error,omitempty"`
}

// Source measures a status.
type Source interface {
	Status(ctx context.Context) (Status, error)
}

// Stalled reports the boundaries whose publisher has been stalled for longer
// than threshold at now.
func (s Status) Stalled(threshold time.Duration, now time.Time) []BoundaryStatus {
	var out []BoundaryStatus
	for _, b := range s.Boundaries {
		if b.State == StateStalled && now.Sub(b.Since) > threshold {
			out = append(out, b)
		}
	}
	return out
}

// Readiness is the body of /readyz.
type Readiness struct {
	Ready   bool     `json:"ready"`
	Reasons []string `json:"reasons,omitempty"`
}

// Ready judges a status: the store answered and takes writes, NATS
// answered, and no publisher has been stalled for longer than threshold.
func Ready(st Status, threshold time.Duration, now time.Time) Readiness {
	var reasons []string
	if !st.Store.OK {
		reasons = append(reasons, "store failing: "+st.Store.Error)
	}
	if !st.NATS.OK {
		reasons = append(reasons, "NATS unreachable: "+st.NATS.Error)
	}
	for _, b := range st.Stalled(threshold, now) {
		reasons = append(reasons, fmt.Sprintf("boundary %s: publisher stalled since %s (longer than %s): %s",
			b.Name, b.Since.Format(time.RFC3339), threshold, b.Reason))
	}
	return Readiness{Ready: len(reasons) == 0, Reasons: reasons}
}

// States are the publisher states, in the order the state metric lists them.
var States = []State{StateLeading, StateStandby, StatePaused, StateStalled}
