package orisun

import (
	"github.com/orisun-io/orisun/internal/testhooks"
	"github.com/orisun-io/orisun/natsembed"
)

// The test seams of a Node are set through package internal/testhooks, so
// that they never show in this package's API.
func init() {
	testhooks.NodeOption = func(h testhooks.Hooks) Option {
		return func(n *Node) {
			if h.AfterAck != nil {
				n.afterAck = h.AfterAck
			}
			if h.CheckpointBeforeAck {
				n.brokenCheckpointOrder = true
			}
			if h.WrapStore != nil {
				n.wrapStore = h.WrapStore
			}
			if h.BeforeStreamMeasured != nil {
				n.beforeStreamMeasured = h.BeforeStreamMeasured
			}
			if h.InstrumentationOff {
				n.noInstrumentation = true
			}
			if h.BeforeMoveCommit != nil {
				n.beforeMoveCommit = h.BeforeMoveCommit
			}
			if h.PermissionsOff {
				n.natsSeam = testhooks.NATSPermissionsOff.(func(*natsembed.Config))
			}
		}
	}
}
