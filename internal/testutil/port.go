package testutil

import (
	"net"
	"testing"
)

// FreePort returns a loopback TCP port that nothing listened on a moment
// ago. Another process may take it before the caller binds it: use port 0
// (or -1 for NATS) wherever the port need not be known in advance.
func FreePort(t testing.TB) int {
	t.Helper()
	return FreePorts(t, 1)[0]
}

// TakenPort returns a loopback TCP port that the test holds (listens on,
// accepting nothing) until it ends: for a test of what a part does when
// its port is taken.
func TakenPort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testutil: take a port: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l.Addr().(*net.TCPAddr).Port
}

// FreePorts returns n distinct free loopback TCP ports: every listener is
// held until all are picked, so they differ. They are closed before it
// returns, so the same caveat as FreePort's applies (internal/cluster
// starts its children again on new ports when one was taken).
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("testutil: pick a free port: %v", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}
