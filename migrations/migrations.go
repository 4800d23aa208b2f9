// Package migrations holds the numbered schema migrations of every SQL
// dialect orisun runs on, embedded in the binary, and the parsing shared by
// the backends that apply them.
// It is orisun's machinery, not for import by applications: its API may
// change without notice, and such a change is not a breaking change of
// orisun.
//
// A migration is a file named NNNN_description.sql in its dialect's folder.
// Versions start at 1 and have no gaps, so a missing or doubled file is a
// build-time test failure rather than a half-migrated database. A backend
// applies each version in its own transaction together with the row that
// records it in schema_migrations, so a crash leaves the schema at a version
// boundary and a restart resumes there.
package migrations

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// SQLite is the SQLite dialect: the files under sqlite/.
//
//go:embed sqlite/*.sql
var SQLite embed.FS

// SQLiteDir is the folder of SQLite inside its FS.
const SQLiteDir = "sqlite"

// Postgres is the PostgreSQL dialect: the files under postgres/.
//
//go:embed postgres/*.sql
var Postgres embed.FS

// PostgresDir is the folder of Postgres inside its FS.
const PostgresDir = "postgres"

// Migration is one schema version.
type Migration struct {
	Version int
	// Name is the file name, e.g. "0001_init.sql".
	Name string
	SQL  string
}

// List reads the migrations in dir of fsys, sorted by version. It fails on a
// file name that does not start with a version number, on a repeated
// version, and on a gap (versions must be 1, 2, 3, …).
func List(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("migrations: read %s: %w", dir, err)
	}
	var out []Migration
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		v, err := version(e.Name())
		if err != nil {
			return nil, fmt.Errorf("migrations: %s/%s: %w", dir, e.Name(), err)
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("migrations: read %s/%s: %w", dir, e.Name(), err)
		}
		out = append(out, Migration{Version: v, Name: e.Name(), SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			if i > 0 && m.Version == out[i-1].Version {
				return nil, fmt.Errorf("migrations: %s: version %d is used by both %s and %s", dir, m.Version, out[i-1].Name, m.Name)
			}
			return nil, fmt.Errorf("migrations: %s: version %d (%s) follows version %d; versions must be 1, 2, 3, … without gaps",
				dir, m.Version, m.Name, i)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("migrations: %s holds no .sql file", dir)
	}
	return out, nil
}

// version parses the leading digits of "0001_init.sql".
func version(name string) (int, error) {
	digits, _, ok := strings.Cut(name, "_")
	if !ok || digits == "" {
		return 0, fmt.Errorf("the name must be NNNN_description.sql")
	}
	v, err := strconv.Atoi(digits)
	if err != nil || v < 1 {
		return 0, fmt.Errorf("the name must start with a positive version number followed by '_', got %q", digits)
	}
	return v, nil
}
