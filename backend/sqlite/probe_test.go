package sqlite

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testutil"
)

// TestProbeWrite: the write probe succeeds on a store that takes writes
// and leaves nothing behind; on a full file system it fails as
// unavailable, naming the cause, as an append does; once space is freed it
// succeeds again; on a closed store it is ErrClosed. The directory is a
// tmpfs of the test's own (root only; under CI=true a machine that cannot
// mount fails the test rather than skip it).
func TestProbeWrite(t *testing.T) {
	dir := testutil.MountTmpfs(t, "16m", "")
	ctx := context.Background()
	s, err := Open(ctx, Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, _, err := s.CreateBoundary(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := s.ProbeWrite(ctx); err != nil {
		t.Fatalf("probe on a writable store: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, probeFile)); !os.IsNotExist(err) {
		t.Fatalf("the probe left its file behind: %v", err)
	}

	// Fill the file system to the last byte.
	filler := filepath.Join(dir, "filler")
	testutil.FillFile(t, filler)
	err = s.ProbeWrite(ctx)
	if !errors.Is(err, event.ErrUnavailable) || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("probe on a full file system: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, probeFile)); !os.IsNotExist(err) {
		t.Fatalf("the failed probe left its file behind: %v", err)
	}
	var aerr error
	for i := 0; i < 100 && aerr == nil; i++ { // the WAL may hold a few
		_, aerr = s.Append(ctx, "b", []event.Input{{ID: event.NewID(), Type: "t", Data: []byte(`{"pad":"` + strings.Repeat("x", 8000) + `"}`)}}, nil)
	}
	if !errors.Is(aerr, event.ErrUnavailable) {
		t.Fatalf("appends on a full file system: %v (the probe must fail where appends do)", aerr)
	}
	t.Logf("full: probe %v; append %v", err, aerr)

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := s.ProbeWrite(ctx); err != nil {
		t.Fatalf("probe once space is freed: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.ProbeWrite(ctx); !errors.Is(err, event.ErrClosed) {
		t.Fatalf("probe on a closed store: %v", err)
	}
}
