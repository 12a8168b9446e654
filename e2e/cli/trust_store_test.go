package cli

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"agent/e2e/internal/e2etest"
	"agent/event"
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
			e := e2etest.New(t, llmtest.Turn{Text: "one"}, llmtest.Turn{Text: "two"}, llmtest.Turn{Text: "three"})
			var runID string
			for range 3 {
				res := e.Run("run", "--json", "say something")
				if res.Code != 0 {
					t.Fatalf("run: exit %d %s", res.Code, res.Stderr)
				}
				runID = e2etest.DecodeRunID(t, res.Stdout)
			}
			path := filepath.Join(e.Home, "agent.db")
			tt.damage(t, path)
			for _, args := range [][]string{{"runs", "list"}, {"run", "say more"}, {"runs", "show", runID}, {"resume", runID}} {
				res := e.Run(args...)
				line := strings.TrimSpace(res.Stderr)
				if res.Code != 5 || !strings.Contains(line, path) || !strings.Contains(line, "mv "+path+" "+path+".broken") ||
					strings.Contains(line, "\n") {
					t.Errorf("agent %s on a damaged store: exit %d, stderr %q; want exit 5 and one line naming %s and the way out",
						strings.Join(args, " "), res.Code, res.Stderr, path)
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

// gaplessEvents returns a run's events as `agent runs events --json`
// prints them from the store, failing the test unless their seqs are
// 1, 2, 3… with no gap.
func gaplessEvents(t *testing.T, e *e2etest.Env, runID string) []event.Event {
	t.Helper()
	res := e.Run("runs", "events", runID, "--json")
	if res.Code != 0 {
		t.Fatalf("runs events: exit %d %s", res.Code, res.Stderr)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("stored event %d (%s) has seq %d: a client waiting for seq %d waits forever", i, ev.Type, ev.Seq, i+1)
		}
	}
	return evs
}
