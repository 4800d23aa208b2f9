//go:build !unix

package datadir

import (
	"fmt"
	"os"
	"runtime"
)

// tryLock refuses: without an exclusive lock two processes could share one
// directory.
func tryLock(*os.File) (bool, error) {
	return false, fmt.Errorf("%w (%s)", ErrUnsupported, runtime.GOOS)
}

func inode(*os.File) uint64 { return 0 }
