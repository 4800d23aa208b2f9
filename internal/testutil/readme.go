package testutil

import (
	"strings"
	"testing"
)

// ReadmeVariable is a row of README.md's configuration table, its cells as
// README.md writes them (Markdown).
type ReadmeVariable struct {
	// Name is the variable, without its backticks: ORISUN_DATA_DIR.
	Name string
	// Default is the default column as written: "`60s`", "(none)".
	Default string
	// Meaning is the meaning column, without the row's closing "|".
	Meaning string
}

// ReadmeVariables reads README.md's configuration table, the one headed
// | variable | default | meaning |, in its order: what
// TestConfigDefaultsMatchREADME checks Config against and what cmd/orisun's
// TestEnvTable copies into `orisun env`. The test fails if readme has no
// such table or a table without rows, if a row is not
// | `VARIABLE` | default | meaning |, or if two rows name one variable.
func ReadmeVariables(t testing.TB, readme string) []ReadmeVariable {
	t.Helper()
	_, table, ok := strings.Cut(readme, "\n| variable | default | meaning |\n|---|---|---|\n")
	if !ok {
		t.Fatal("README.md has no table headed | variable | default | meaning |")
	}
	var rows []ReadmeVariable
	seen := map[string]bool{}
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.SplitN(line, " | ", 3)
		name, ok := strings.CutPrefix(cells[0], "| `")
		if len(cells) < 3 || !ok || !strings.HasSuffix(name, "`") {
			t.Fatalf("README.md: a row of the configuration table is not | `VARIABLE` | default | meaning |: %s", line)
		}
		name = strings.TrimSuffix(name, "`")
		if seen[name] {
			t.Errorf("README.md's configuration table has two rows for %s", name)
		}
		seen[name] = true
		meaning := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(cells[2]), "|"))
		rows = append(rows, ReadmeVariable{Name: name, Default: cells[1], Meaning: meaning})
	}
	if len(rows) == 0 {
		t.Fatal("README.md's configuration table has no rows")
	}
	return rows
}
