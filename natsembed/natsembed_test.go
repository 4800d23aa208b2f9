package natsembed_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
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
	start := time.Now()
	startRefused(t, natsembed.Config{Port: testutil.TakenPort(t), StoreDir: t.TempDir(), ReadyTimeout: 30 * time.Second},
		"its port in use", "address already in use")
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("took %s to report a taken port", took)
	}
}

// startRefused starts a server with cfg and fails the test unless Start
// fails with an error that holds want; taken says what was in use.
func startRefused(t *testing.T, cfg natsembed.Config, taken, want string) {
	t.Helper()
	s, err := natsembed.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Start()
	if err == nil {
		s.Stop()
		t.Fatalf("started with %s", taken)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error does not say %q (%s): %v", want, taken, err)
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

// TestStreamBytes: what StreamBytes reports is what the memory streams
// hold (the gc tuner keeps that much out of the collector's room), and a
// file stream is not counted.
func TestStreamBytes(t *testing.T) {
	s := natstest.Server(t, natsembed.Config{})
	if got := s.StreamBytes(); got != 0 {
		t.Fatalf("StreamBytes %d before any stream, want 0", got)
	}
	nc := natstest.Orisun(t, s, "t")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var want uint64
	for _, c := range []jetstream.StreamConfig{
		{Name: "MEM", Subjects: []string{"mem.>"}, Storage: jetstream.MemoryStorage},
		{Name: "FILE", Subjects: []string{"file.>"}, Storage: jetstream.FileStorage},
	} {
		st, err := js.CreateStream(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		subject := strings.ToLower(c.Name) + ".x"
		for i := 0; i < 500; i++ {
			if _, err := js.Publish(ctx, subject, make([]byte, 1000+i)); err != nil {
				t.Fatal(err)
			}
		}
		info := natstest.Info(t, st)
		if c.Storage == jetstream.MemoryStorage {
			want = info.State.Bytes
		}
	}
	if got := s.StreamBytes(); got != int64(want) || want < 500*1000 {
		t.Fatalf("StreamBytes %d, want the memory stream's %d", got, want)
	}
}
