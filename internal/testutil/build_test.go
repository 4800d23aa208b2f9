package testutil

import (
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestBuild: a binary is built once for each package and tags, however
// many ask at once, with the tags given.
func TestBuild(t *testing.T) {
	const pkg = "github.com/orisun-io/orisun/internal/testutil/testdata/hello"
	var wg sync.WaitGroup
	bins := make([]string, 4)
	for i := range bins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tags := []string(nil)
			if i%2 == 1 {
				tags = []string{"testutiltag"}
			}
			bins[i] = Build(t, Binary{Pkg: pkg, Tags: tags})
		}()
	}
	wg.Wait()
	if bins[0] != bins[2] || bins[1] != bins[3] || bins[0] == bins[1] {
		t.Fatalf("built %v: want one binary per set of tags", bins)
	}
	for i, want := range []string{"hello", "hello, tagged"} {
		out, err := exec.Command(bins[i]).Output()
		if err != nil || strings.TrimSpace(string(out)) != want {
			t.Fatalf("%s: %q %v, want %q", bins[i], out, err, want)
		}
	}
	if filepath.Base(bins[0]) != "hello" {
		t.Fatalf("binary named %s", filepath.Base(bins[0]))
	}
	msg := failing(t, func(tb testing.TB) { Build(tb, Binary{Pkg: pkg + "/nosuch"}) })
	if !strings.Contains(msg, "go build") || !strings.Contains(msg, "nosuch") {
		t.Fatalf("a failed build failed with %q", msg)
	}
}
