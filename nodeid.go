package orisun

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/orisun-io/orisun/event"
)

// nodeIDFile holds the generated node id in the data directory.
const nodeIDFile = "node-id"

// persistedNodeID returns the node id kept in dir/node-id, generating it
// (host name plus a random suffix) and writing it once when the file does
// not exist. Without ORISUN_NODE_ID a node must keep its id across
// restarts: in an embedded NATS cluster the id is the server name, hence the
// JetStream peer's name, and a new name on every start would leave the old
// peers behind in the cluster's meta group.
//
// The file is written to a temporary name, synced, and linked into place:
// a link never replaces an existing file, so two processes starting at once
// on one directory agree on the first id written, and a crash never leaves
// a half-written id.
func persistedNodeID(dir string, onlyForID bool) (string, error) {
	path := filepath.Join(dir, nodeIDFile)
	// Every failure names the file and the way out. Setting ORISUN_NODE_ID
	// is one only where nothing else needs the directory (onlyForID: an
	// external NATS and PostgreSQL); elsewhere the store or JetStream
	// would fail next on the same directory.
	fail := func(what string, err error) (string, error) {
		way := fmt.Sprintf("make the data directory writable by this user (uid %d), or set ORISUN_DATA_DIR to one that is", os.Getuid())
		if onlyForID {
			way += ", or set ORISUN_NODE_ID (a name unique among the nodes, stable across restarts)"
		}
		return "", fmt.Errorf("ORISUN_DATA_DIR: %s the node id file %s: %w; %s", what, path, err, way)
	}
	id, err := readNodeID(path)
	switch {
	case err == nil:
		return id, nil
	case errors.Is(err, errBadNodeID):
		return "", err
	case !errors.Is(err, os.ErrNotExist):
		return fail("cannot read", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail("cannot create the directory of", err)
	}
	id = defaultNodeID()
	tmp, err := os.CreateTemp(dir, nodeIDFile+".tmp-*")
	if err != nil {
		return fail("cannot write", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(id + "\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp.Name(), path)
		if errors.Is(err, os.ErrExist) {
			// Another process on this directory wrote it first: use its id.
			if id, err := readNodeID(path); err == nil || errors.Is(err, errBadNodeID) {
				return id, err
			}
			return fail("cannot read", err)
		}
		if err != nil {
			// A file system without hard links: a rename is atomic too,
			// only not exclusive.
			err = os.Rename(tmp.Name(), path)
		}
	}
	if err != nil {
		return fail("cannot write", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // the new directory entry survives a power loss
		d.Close()
	}
	return id, nil
}

// errBadNodeID marks a node id file that was read but holds no valid id.
var errBadNodeID = errors.New("not a node id")

// readNodeID reads and checks a node id file.
func readNodeID(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(b))
	if err := checkNodeID(id); err != nil {
		return "", fmt.Errorf("ORISUN_DATA_DIR: %s holds %q: %v (%w); delete the file to generate a new id, or set ORISUN_NODE_ID", path, id, err, errBadNodeID)
	}
	return id, nil
}

// checkNodeID accepts what defaultNodeID and a sensible ORISUN_NODE_ID
// produce: printable, no white space, at most 128 bytes.
func checkNodeID(id string) error {
	if id == "" {
		return errors.New("the node id is empty")
	}
	if len(id) > 128 {
		return fmt.Errorf("the node id is %d bytes, more than 128", len(id))
	}
	if strings.ContainsFunc(id, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return errors.New("the node id holds white space or control characters")
	}
	return nil
}

func defaultNodeID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "orisun"
	}
	return host + "-" + event.NewID()[24:]
}
