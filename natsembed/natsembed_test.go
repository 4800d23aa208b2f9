package natsembed_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/natsembed"
)

func TestLifecycle(t *testing.T) {
	s, err := natsembed.New(natsembed.Config{Port: -1, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	s.Stop() // before start: nothing to do
	s, _ = natsembed.New(natsembed.Config{Port: -1, StoreDir: t.TempDir()})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s.ClientURL(), "nats://127.0.0.1:") {
		t.Fatalf("listens on %s, want loopback", s.ClientURL())
	}
	nc, err := s.Connect("t")
	if err != nil {
		t.Fatal(err)
	}
	if !nc.IsConnected() {
		t.Fatal("not connected")
	}
	nc.Close()
	s.Stop()
	s.Stop()
	if err := s.Start(); err == nil {
		t.Fatal("start after stop succeeded")
	}
}

func TestPortInUse(t *testing.T) {
	s, _ := natsembed.New(natsembed.Config{Port: testutil.TakenPort(t), StoreDir: t.TempDir(), ReadyTimeout: 30 * time.Second})
	start := time.Now()
	err := s.Start()
	if err == nil {
		s.Stop()
		t.Fatal("started on a port in use")
	}
	if !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("error does not say the port is in use: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("took %s to report a taken port", took)
	}
}

func TestStoreDirRequired(t *testing.T) {
	if _, err := natsembed.New(natsembed.Config{}); err == nil {
		t.Fatal("no error without a store directory")
	}
}

// TestListenError: a client or route port in use fails Start with a
// ListenError that says which listener and where, so that the node can
// name the setting that chose the port.
func TestListenError(t *testing.T) {
	taken := testutil.TakenPort(t)
	for _, c := range []struct {
		listener string
		cfg      natsembed.Config
	}{
		{"client", natsembed.Config{Host: "127.0.0.1", Port: taken, StoreDir: t.TempDir()}},
		{"cluster", natsembed.Config{Host: "127.0.0.1", Port: -1, StoreDir: t.TempDir(), ServerName: "n1",
			Cluster: &natsembed.Cluster{Name: "c", Host: "127.0.0.1", Port: taken, Routes: []string{"nats-route://127.0.0.1:" + strconv.Itoa(taken)}}}},
	} {
		s, err := natsembed.New(c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		err = s.Start()
		s.Stop()
		var le *natsembed.ListenError
		if !errors.As(err, &le) {
			t.Fatalf("%s port in use: Start returned %v, want a ListenError", c.listener, err)
		}
		if want := "127.0.0.1:" + strconv.Itoa(taken); le.Listener != c.listener || le.Addr != want || !strings.Contains(le.Cause(), "address already in use") {
			t.Errorf("%s port in use: %+v (cause %q), want listener %s on %s", c.listener, le, le.Cause(), c.listener, want)
		}
	}
}
