package orisun_test

// The tests of this file are about the data directory's lock with
// PostgreSQL (docs/design.md §9): where a node may run without it, and
// what a copy of a locked directory may take.

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/internal/datadir"
	"github.com/orisun-io/orisun/internal/pgtest"
)

// readOnlyDir returns a directory this process cannot write in: a
// read-only tmpfs mounted for the test as root (root writes into a
// directory without write permission anyway), else a directory without
// write permission. A root that cannot mount skips the test, except under
// CI (CI=true), where it fails.
func readOnlyDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(dir, 0o755) })
	} else {
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", dir).CombinedOutput(); err != nil {
			msg := fmt.Sprintf("cannot mount a read-only tmpfs on %s (%v: %s): as root that needs CAP_SYS_ADMIN", dir, err,
				strings.TrimSpace(string(out)))
			if os.Getenv("CI") != "" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
		t.Cleanup(func() {
			if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
				t.Errorf("umount %s: %v: %s", dir, err, out)
			}
		})
	}
	if f, err := os.CreateTemp(dir, "probe-*"); err == nil {
		f.Close()
		t.Fatalf("%s was to be read-only, and a file could be created in it", dir)
	}
	return dir
}

// TestStatelessNodeOnReadOnlyDataDir: with PostgreSQL and an external NATS
// (ORISUN_NATS_URL) a node keeps nothing in its data directory but the
// lock file (and the node-id file, unless ORISUN_NODE_ID is set): a
// stateless container with a read-only file system and ORISUN_NODE_ID ran
// before the directory was locked, and it still does. It starts without
// the lock, logs a WARN that names ORISUN_DATA_DIR and says that a restart
// then waits ORISUN_LEASE_TTL, and publishes. Another process holding the
// lock of a writable directory still refuses the node; with the embedded
// NATS (JetStream's store lives there) the read-only directory fails the
// start, named.
func TestStatelessNodeOnReadOnlyDataDir(t *testing.T) {
	url := pgtest.URL(t)
	ns := usersNATS(t)
	ro := readOnlyDir(t)
	logs := &syncBuffer{}
	stateless := func(c *orisun.Config) {
		ns.join(c, url)
		c.NodeID = "stateless-1"
	}
	n := setup(t, ro, stateless, orisun.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	if _, err := n.Append(context.Background(), "default", events(5, "ro", 32), nil); err != nil {
		t.Fatal(err)
	}
	waitSettled(t, n, 30*time.Second)
	var warn string
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "the data directory cannot be locked") {
			warn = line
		}
	}
	for _, want := range []string{"ORISUN_DATA_DIR", "ORISUN_LEASE_TTL", "data_dir=" + ro} {
		if !strings.Contains(warn, want) {
			t.Fatalf("no WARN about the missing lock that names %q; the log:\n%s", want, logs.String())
		}
	}
	if _, err := os.Stat(filepath.Join(ro, datadir.LockFile)); !os.IsNotExist(err) {
		t.Fatalf("a lock file in the read-only directory: %v", err)
	}

	// A writable directory another process has locked: refused, as before.
	held := t.TempDir()
	l, err := datadir.Acquire(held)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	cfg := orisun.Config{DataDir: held, NATSPort: -1, LeaseTTL: 2 * time.Second}
	stateless(&cfg)
	cfg.NodeID = "stateless-2"
	other, err := orisun.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = other.Start(context.Background())
	other.Stop()
	if want := "ORISUN_DATA_DIR: data directory " + fmt.Sprintf("%q", held) + " is locked by another orisun process"; err == nil ||
		!strings.Contains(err.Error(), want) {
		t.Fatalf("a stateless node on a directory locked by another process: %v, want an error containing %q", err, want)
	}

	// The embedded NATS keeps JetStream's store in the directory: refused.
	embedded, err := orisun.New(orisun.Config{DataDir: ro, NATSPort: -1, Backend: "postgres", PGURL: url, NodeID: "embedded"})
	if err != nil {
		t.Fatal(err)
	}
	err = embedded.Start(context.Background())
	embedded.Stop()
	if err == nil || !strings.Contains(err.Error(), "ORISUN_DATA_DIR") || !strings.Contains(err.Error(), ro) {
		t.Fatalf("an embedded NATS on a read-only data directory: %v, want an error naming ORISUN_DATA_DIR and %s", err, ro)
	}
}
