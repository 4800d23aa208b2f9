package orisun_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orisun-io/orisun"
)

// TestNodeIDKeptInDataDir: without ORISUN_NODE_ID a node generates its id
// once, keeps it in <data dir>/node-id, and a restart on the same data
// directory reuses it (in an embedded cluster the id names the JetStream
// peer, so a new one on each start would leave stale peers behind). A
// node id file that holds no id fails New with a message naming the file.
func TestNodeIDKeptInDataDir(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	first := setup(t, dir, nil)
	st, err := first.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id := st.NodeID
	if id == "" || first.Config().NodeID != id {
		t.Fatalf("node id %q (config %q)", id, first.Config().NodeID)
	}
	b, err := os.ReadFile(filepath.Join(dir, "node-id"))
	if err != nil || strings.TrimSpace(string(b)) != id {
		t.Fatalf("node-id file holds %q (err %v), want %q", b, err, id)
	}
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	second := setup(t, dir, nil)
	st, err = second.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.NodeID != id {
		t.Fatalf("node id after a restart on the same data directory: %q, want %q", st.NodeID, id)
	}
	if err := second.Stop(); err != nil {
		t.Fatal(err)
	}

	// An explicit id wins and leaves the file alone.
	third := setup(t, dir, func(c *orisun.Config) { c.NodeID = "explicit" })
	if third.Config().NodeID != "explicit" {
		t.Fatalf("explicit node id ignored: %q", third.Config().NodeID)
	}
	if err := third.Stop(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "node-id")); strings.TrimSpace(string(b)) != id {
		t.Fatalf("node-id file changed to %q by a node with an explicit id", b)
	}

	// Another data directory, another id.
	if other := setup(t, "", nil); other.Config().NodeID == id {
		t.Fatalf("two data directories share the node id %q", id)
	}

	// A file that holds no id is refused, naming the file.
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "node-id"), []byte("  \n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := orisun.New(orisun.Config{DataDir: bad}); err == nil || !strings.Contains(err.Error(), "node-id") {
		t.Fatalf("New with an empty node-id file: %v, want an error naming the file", err)
	}
}

// TestNodeIDFileNotWritable: the node-id file is written even with an
// external NATS and PostgreSQL, so a data directory where it cannot be
// kept fails New with a message that names the file and says to set
// ORISUN_NODE_ID; with ORISUN_NODE_ID set the same directory is no
// obstacle.
func TestNodeIDFileNotWritable(t *testing.T) {
	blocked := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocked, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	unreadable := t.TempDir()
	if err := os.Mkdir(filepath.Join(unreadable, "node-id"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, dir string }{
		{"data dir below a file", filepath.Join(blocked, "data")},
		{"node-id is a directory", unreadable},
	}
	if os.Geteuid() != 0 { // root writes into a read-only directory anyway
		ro := t.TempDir()
		if err := os.Chmod(ro, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(ro, 0o755) })
		cases = append(cases, struct{ name, dir string }{"read-only data dir", ro})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := orisun.New(orisun.Config{DataDir: c.dir})
			if err == nil {
				t.Fatal("New succeeded without a place for the node id")
			}
			for _, want := range []string{filepath.Join(c.dir, "node-id"), "ORISUN_NODE_ID"} {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("error %q does not name %q", err, want)
				}
			}
			if _, err := orisun.New(orisun.Config{DataDir: c.dir, NodeID: "explicit"}); err != nil {
				t.Fatalf("New with ORISUN_NODE_ID set: %v", err)
			}
		})
	}
}
