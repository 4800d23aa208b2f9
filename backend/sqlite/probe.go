package sqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/orisun-io/orisun/event"
)

// probeBytes is the size of the write probe's file: a few pages of the
// database's, so that a disk with room for the probe only is rare.
const probeBytes = 64 << 10

// probeFile is the probe's file in the data directory; it exists only
// while a probe runs.
const probeFile = ".orisun-write-probe"

// ProbeWrite checks that the data directory takes new bytes now: it
// writes a file of probeBytes beside the database, syncs it and removes
// it. The database itself is not touched, and no reader sees anything. A
// full disk, a read-only file system or a failing device fails the
// database's writes and this probe alike (ErrUnavailable). The node runs
// it while store writes fail, to see them work again without waiting for
// an append (docs/operations.md, "When the store fails").
func (s *Store) ProbeWrite(ctx context.Context) error {
	const op = "probe write"
	if s.closed() {
		return errClosed(op)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sqlite: %s: %w", op, err)
	}
	path := filepath.Join(s.cfg.Dir, probeFile)
	err := writeSynced(path, make([]byte, probeBytes))
	if rmErr := os.Remove(path); err == nil && rmErr != nil && !os.IsNotExist(rmErr) {
		err = rmErr
	}
	if err != nil {
		return fmt.Errorf("sqlite: %s: %w: %v", op, event.ErrUnavailable, err)
	}
	return nil
}

func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
