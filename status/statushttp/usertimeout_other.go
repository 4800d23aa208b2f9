//go:build !linux

package statushttp

import (
	"net"
	"time"
)

// setUserTimeout is Linux's only (TCP_USER_TIMEOUT); elsewhere a vanished
// client's tail ends after TCP's own retransmission timeout.
func setUserTimeout(net.Conn, time.Duration) error { return nil }
