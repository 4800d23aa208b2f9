// Package nodetest starts the embedded node that a runnable example talks
// to: the examples of package orisun, client and checkpoint show what they
// do with a node, and the node comes from here instead of a copy of the
// same setup in each. It is apart from package testutil, which needs
// nothing but the standard library. It is orisun's machinery, not for
// import by applications (being internal, it cannot be): its API may change
// without notice.
package nodetest

import (
	"context"
	"log"
	"os"
	"path/filepath"

	"github.com/orisun-io/orisun"
)

// Start starts an embedded node on SQLite in a new temporary directory, its
// data in dir/node, with its NATS server on a random port (NATSPort -1) and
// no HTTP listener. dir is the example's own: it may keep files of its own
// there. stop stops the node and removes dir. An example has no
// *testing.T: Start ends the program (log.Fatal) if the node cannot start.
func Start() (n *orisun.Node, dir string, stop func()) {
	dir, err := os.MkdirTemp("", "orisun-example")
	if err != nil {
		log.Fatal(err)
	}
	n, err = orisun.New(orisun.Config{DataDir: filepath.Join(dir, "node"), NATSPort: -1})
	if err != nil {
		os.RemoveAll(dir)
		log.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		os.RemoveAll(dir)
		log.Fatal(err)
	}
	return n, dir, func() {
		err := n.Stop()
		os.RemoveAll(dir)
		if err != nil {
			log.Fatal(err)
		}
	}
}
