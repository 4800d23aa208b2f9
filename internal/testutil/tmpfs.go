package testutil

import (
	"os"
	"testing"
)

// FillFile writes zeros to path until the file system is full (the last
// write fails for want of space) and returns how many bytes it wrote.
func FillFile(t testing.TB, path string) int64 {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var n int64
	for _, size := range []int{64 << 10, 512} {
		chunk := make([]byte, size)
		for {
			w, err := f.Write(chunk)
			n += int64(w)
			if err != nil {
				break
			}
		}
	}
	return n
}
