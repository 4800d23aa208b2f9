package migrations

import (
	"embed"
	"strings"
	"testing"
	"testing/fstest"
)

// TestListEmbedded: each dialect's embedded migrations start at version 1
// with 0001_init.sql, and none is empty.
func TestListEmbedded(t *testing.T) {
	for _, d := range []struct {
		fsys embed.FS
		dir  string
	}{{SQLite, SQLiteDir}, {Postgres, PostgresDir}} {
		t.Run(d.dir, func(t *testing.T) {
			ms, err := List(d.fsys, d.dir)
			if err != nil {
				t.Fatal(err)
			}
			if ms[0].Version != 1 || ms[0].Name != "0001_init.sql" {
				t.Fatalf("first migration = %d %s, want 1 0001_init.sql", ms[0].Version, ms[0].Name)
			}
			for _, m := range ms {
				if strings.TrimSpace(m.SQL) == "" {
					t.Errorf("%s is empty", m.Name)
				}
			}
		})
	}
}

func TestListRejects(t *testing.T) {
	file := &fstest.MapFile{Data: []byte("SELECT 1;")}
	tests := []struct {
		name  string
		files fstest.MapFS
		want  string
	}{
		{"gap", fstest.MapFS{"d/0001_a.sql": file, "d/0003_c.sql": file}, "without gaps"},
		{"not from one", fstest.MapFS{"d/0002_b.sql": file}, "without gaps"},
		{"duplicate", fstest.MapFS{"d/0001_a.sql": file, "d/0001_b.sql": file}, "used by both"},
		{"no number", fstest.MapFS{"d/init.sql": file}, "NNNN_description.sql"},
		{"bad number", fstest.MapFS{"d/x1_init.sql": file}, "positive version number"},
		{"zero", fstest.MapFS{"d/0000_init.sql": file}, "positive version number"},
		{"empty", fstest.MapFS{"d/README": file}, "no .sql file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := List(tt.files, "d")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("List: err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestListIgnoresOtherFiles(t *testing.T) {
	file := &fstest.MapFile{Data: []byte("SELECT 1;")}
	ms, err := List(fstest.MapFS{"d/0001_a.sql": file, "d/README.md": file, "d/0002_b.sql": file}, "d")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[1].Name != "0002_b.sql" {
		t.Fatalf("List = %+v, want 0001_a.sql and 0002_b.sql", ms)
	}
}
