package statushttp

import (
	"context"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/orisun-io/orisun/status"
)

// TestListenerConnectionsHaveUserTimeout: every connection the listener
// accepts carries TCP_USER_TIMEOUT (the second review of issue 20: a
// vanished client's quiet tail held its slot for TCP's 15 minutes, since a
// keep-alive never fills the buffers the write deadline waits on).
func TestListenerConnectionsHaveUserTimeout(t *testing.T) {
	s := NewServer(statusOf{}, Options{Addr: "127.0.0.1:0"})
	seen := make(chan time.Duration, 4)
	s.connSeen = func(c net.Conn) {
		d, err := userTimeout(c)
		if err != nil {
			t.Error(err)
		}
		seen <- d
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	resp, err := http.Get("http://" + s.Addr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if d := <-seen; d != UserTimeout {
		t.Fatalf("an accepted connection's TCP_USER_TIMEOUT is %v, want %v", d, UserTimeout)
	}
}

// statusOf is a status source that answers an empty status.
type statusOf struct{}

func (statusOf) Status(context.Context) (status.Status, error) { return status.Status{}, nil }

// userTimeout reads c's TCP_USER_TIMEOUT.
func userTimeout(c net.Conn) (time.Duration, error) {
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var ms int
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		ms, gerr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout)
	}); err != nil {
		return 0, err
	}
	return time.Duration(ms) * time.Millisecond, gerr
}
