package orisun

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/orisun-io/orisun/natsembed"
)

// natsStartError names the variable that chose a NATS listener that could
// not be opened (a port in use), in the voice of the configuration errors:
// the variable, the value, why, and what to do. Other errors pass as they
// are.
func natsStartError(err error) error {
	var le *natsembed.ListenError
	if !errors.As(err, &le) {
		return err
	}
	if le.Listener == "cluster" {
		return fmt.Errorf("ORISUN_NATS_CLUSTER_PORT: cannot listen for the cluster's routes on %s (%s): %w; "+
			"stop what listens there, or set ORISUN_NATS_CLUSTER_PORT (and ORISUN_NATS_CLUSTER_HOST) to a free port", le.Addr, le.Cause(), errPortInUse)
	}
	return fmt.Errorf("ORISUN_NATS_PORT: cannot listen for NATS clients on %s (%s): %w; "+
		"stop what listens there, or set ORISUN_NATS_PORT to a free port (-1: a random one) or ORISUN_NATS_HOST to another interface", le.Addr, le.Cause(), errPortInUse)
}

// errPortInUse marks a start that failed on a listener.
var errPortInUse = errors.New("the port is in use or not allowed")

// needsDataDir reports whether the node keeps more than its node-id file
// in the data directory: the SQLite store, or the embedded NATS server's
// JetStream state.
func (c Config) needsDataDir() bool {
	return c.Backend != "postgres" || c.NATSURL == ""
}

// prepareDataDir creates the data directory and, when the node keeps its
// store or JetStream's state there (needed), checks that this process can
// write in it: otherwise the store's lock file or JetStream would fail
// later with a message that no longer names ORISUN_DATA_DIR.
func prepareDataDir(dir string, needed bool) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return dataDirError(dir, "cannot create it", err)
	}
	if !needed {
		return nil
	}
	f, err := os.CreateTemp(dir, ".write-test-*")
	if err != nil {
		return dataDirError(dir, "cannot write in it", err)
	}
	name := f.Name()
	f.Close()
	if err := os.Remove(name); err != nil {
		return dataDirError(dir, "cannot remove a file from it", err)
	}
	return nil
}

// dataDirError says what failed in the data directory and the way out.
func dataDirError(dir, what string, err error) error {
	where := dir
	if abs, aerr := filepath.Abs(dir); aerr == nil && abs != filepath.Clean(dir) {
		where += " (" + abs + ")"
	}
	return fmt.Errorf("ORISUN_DATA_DIR: %s: %s: %w; make it writable by this user (uid %d), "+
		"or set ORISUN_DATA_DIR to a directory that is", where, what, err, os.Getuid())
}
