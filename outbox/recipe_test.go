package outbox_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testutil"
)

// nodePG returns a directory whose node_modules holds node's PostgreSQL
// driver pg, installed once per machine with npm into the user's cache.
func nodePG(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.Unavailable(t, tool+" is not installed: the recipe of docs/outbox.md for node's pg needs it (apt-get install nodejs npm)")
		}
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "orisun-test-node-pg")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "pg", "package.json")); err == nil {
		return dir
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--prefix", dir, "pg@8")
	if out, err := cmd.CombinedOutput(); err != nil {
		testutil.Unavailable(t, "npm install pg@8 failed (is the npm registry reachable?): "+err.Error()+"\n"+string(out))
	}
	return dir
}

// TestNodePGRecipe runs the recipe of docs/outbox.md ("Other languages")
// for node's pg as it is written there, as an application's login role (a
// member of the database's application role, with INSERT on its own table
// only): the application's row and the event commit together, the event
// at position 1 with the data as sent.
func TestNodePGRecipe(t *testing.T) {
	block := testutil.DocRecipe(t, "../docs/outbox.md", "node-pg")
	modules := nodePG(t)
	f := setup(t)
	ctx := context.Background()
	appURL := pgtest.LoginRole(t, f.url, pgtest.AppRole(t, f.url))
	var role string
	if err := pgtest.Connect(t, appURL).QueryRow(ctx, `SELECT current_user`).Scan(&role); err != nil {
		t.Fatal(err)
	}
	if _, err := pgtest.Connect(t, f.url).Exec(ctx, `GRANT INSERT ON orders TO `+role); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(modules, "recipe-"+role+".js")
	// The recipe awaits at its top level: a CommonJS script runs it in an
	// async function.
	if err := os.WriteFile(script, []byte("(async () => {\n"+block+"\n})().catch((e) => { console.error(e); process.exit(1); });\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(script)
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, "node", script)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+appURL)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the recipe failed: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "appended at 1 in epoch ") {
		t.Fatalf("the recipe printed %q, want the position 1 and the epoch", out)
	}
	if got := logOf(t, f); len(got) != 1 || got[0] != `{"order":44}` {
		t.Fatalf("the log holds %v, want the recipe's event", got)
	}
	if got := texts(t, f, `SELECT customer FROM orders WHERE id = 44`); len(got) != 1 || got[0] != "c-8" {
		t.Fatalf("the application's table holds %v for order 44, want its row", got)
	}
}
