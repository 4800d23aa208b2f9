package testutil

import (
	"fmt"
	"net"
	"slices"
	"testing"
)

func TestFreePorts(t *testing.T) {
	ports := FreePorts(t, 5)
	if len(ports) != 5 {
		t.Fatalf("%d ports", len(ports))
	}
	for i, p := range ports {
		if slices.Contains(ports[:i], p) {
			t.Fatalf("port %d twice in %v", p, ports)
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Fatalf("port %d is not free: %v", p, err)
		}
		l.Close()
	}
	if p := FreePort(t); p <= 0 {
		t.Fatalf("FreePort: %d", p)
	}
}

func TestTakenPort(t *testing.T) {
	p := TakenPort(t)
	if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p)); err == nil {
		l.Close()
		t.Fatalf("port %d could be listened on again: it is not held", p)
	}
}
