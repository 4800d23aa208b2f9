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

// TestNodeIDFileNotWritable: a data directory where the node-id file
// cannot be kept fails New with a message that names the file and
// ORISUN_DATA_DIR. Only where nothing else needs the directory (PostgreSQL
// and an external NATS) does it offer ORISUN_NODE_ID as a way out, and
// there the id set so makes the directory no obstacle; on SQLite the
// store needs the directory too, so the message does not send anyone to
// ORISUN_NODE_ID, and with an id set Start still names ORISUN_DATA_DIR
// (issue 18: the hint led to an error that no longer named it).
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
	external := func(dir string) orisun.Config {
		return orisun.Config{DataDir: dir, Backend: "postgres", PGURL: "postgres://db/orisun", NATSURL: "nats://127.0.0.1:1"}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := orisun.New(orisun.Config{DataDir: c.dir})
			if err == nil {
				t.Fatal("New succeeded without a place for the node id")
			}
			for _, want := range []string{filepath.Join(c.dir, "node-id"), "ORISUN_DATA_DIR"} {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("error %q does not name %q", err, want)
				}
			}
			if strings.Contains(err.Error(), "ORISUN_NODE_ID") {
				t.Fatalf("on SQLite the error %q offers ORISUN_NODE_ID, a dead end: the store needs the directory too", err)
			}
			_, err = orisun.New(external(c.dir))
			if err == nil || !strings.Contains(err.Error(), "ORISUN_NODE_ID") {
				t.Fatalf("with PostgreSQL and an external NATS: %v; want an error offering ORISUN_NODE_ID", err)
			}
			cfg := external(c.dir)
			cfg.NodeID = "explicit"
			if _, err := orisun.New(cfg); err != nil {
				t.Fatalf("New with ORISUN_NODE_ID set, PostgreSQL and an external NATS: %v", err)
			}
		})
	}
	// On SQLite with an id set, the directory fails Start, named.
	n, err := orisun.New(orisun.Config{DataDir: cases[0].dir, NodeID: "explicit"})
	if err != nil {
		t.Fatal(err)
	}
	err = n.Start(context.Background())
	n.Stop()
	if err == nil || !strings.Contains(err.Error(), "ORISUN_DATA_DIR") || !strings.Contains(err.Error(), cases[0].dir) {
		t.Fatalf("Start on a data directory below a file: %v; want an error naming ORISUN_DATA_DIR and the directory", err)
	}
}
