package main

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"agent/llm/llmtest"
)

// TestDamagedStoreExits5: a store whose file is damaged, or is not a
// database at all, is the environment's problem: every command exits 5
// with one line naming the file and what to do, even when the damage is
// in a page that opening the store does not read.
func TestDamagedStoreExits5(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"a damaged table", func(t *testing.T, path string) { damageTable(t, path, "runs") }},
		{"not a database", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte(strings.Repeat("not a database\n", 1000)), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newE2E(t, llmtest.Turn{Text: "one"}, llmtest.Turn{Text: "two"}, llmtest.Turn{Text: "three"})
			var runID string
			for range 3 {
				res := e.run("run", "--json", "say something")
				if res.code != 0 {
					t.Fatalf("run: exit %d %s", res.code, res.stderr)
				}
				runID = decodeRunID(t, res.stdout)
			}
			path := filepath.Join(e.home, "agent.db")
			tt.damage(t, path)
			for _, args := range [][]string{{"runs", "list"}, {"run", "say more"}, {"runs", "show", runID}, {"resume", runID}} {
				res := e.run(args...)
				line := strings.TrimSpace(res.stderr)
				if res.code != 5 || !strings.Contains(line, path) || !strings.Contains(line, "mv "+path+" "+path+".broken") ||
					strings.Contains(line, "\n") {
					t.Errorf("agent %s on a damaged store: exit %d, stderr %q; want exit 5 and one line naming %s and the way out",
						strings.Join(args, " "), res.code, res.stderr, path)
				}
			}
		})
	}
}

// damageTable overwrites the root page of a table of the SQLite file at
// path, as a failing disk would; opening the store reads only the schema.
func damageTable(t *testing.T, path, table string) {
	t.Helper()
	raw, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	var page, size int64
	err = raw.QueryRow(`SELECT rootpage FROM sqlite_master WHERE name = ?`, table).Scan(&page)
	if err == nil {
		err = raw.QueryRow(`PRAGMA page_size`).Scan(&size)
	}
	if err == nil {
		_, err = raw.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`)
	}
	raw.Close()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte(strings.Repeat("\xff", int(size))), (page-1)*size); err != nil {
		t.Fatal(err)
	}
}
