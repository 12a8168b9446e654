package store

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"agent/event"
)

// fakeClock is a settable clock, safe for concurrent use.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// createRun inserts a run with no lease.
func createRun(t *testing.T, db *DB, id string) *Run {
	t.Helper()
	r := &Run{ID: id, Prompt: "do it"}
	if err := db.CreateRun(context.Background(), r, "", 0); err != nil {
		t.Fatal(err)
	}
	return r
}

func schemaVersion(t *testing.T, db *DB) int {
	t.Helper()
	var v int
	if err := db.rw.db.QueryRow("PRAGMA user_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestOpenMigrates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "nested", "home")
	path := filepath.Join(dir, "agent.db")

	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	if got := schemaVersion(t, db); got != len(ms) {
		t.Errorf("user_version = %d, want %d", got, len(ms))
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("data dir mode = %v, %v; want 0700", fi.Mode().Perm(), err)
	}
	pragmas := map[string]string{"journal_mode": "wal", "synchronous": "2", "foreign_keys": "1", "busy_timeout": "5000"}
	for name, want := range pragmas {
		var got string
		if err := db.rw.db.QueryRow("PRAGMA " + name).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("PRAGMA %s = %s, want %s", name, got, want)
		}
	}
	createRun(t, db, "run-kept")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopening applies nothing and keeps the data.
	db, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := schemaVersion(t, db); got != len(ms) {
		t.Errorf("user_version after reopen = %d, want %d", got, len(ms))
	}
	if _, err := db.GetRun(ctx, "run-kept"); err != nil {
		t.Errorf("run lost on reopen: %v", err)
	}
}

func TestOpenNewerSchema(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "agent.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.rw.db.Exec("PRAGMA user_version = 999"); err != nil {
		t.Fatal(err)
	}
	db.Close()

	_, err = Open(path)
	if err == nil || !strings.Contains(err.Error(), "newer than this agent") {
		t.Fatalf("Open newer schema: err = %v, want a newer-schema error", err)
	}
}

func TestOpenRejectsQuestionMark(t *testing.T) {
	t.Parallel()
	if _, err := Open(filepath.Join(t.TempDir(), "a?b.db")); err == nil {
		t.Fatal("Open accepted a path with '?'")
	}
}

// Two handles on one file stand for two processes: the busy timeout and
// BEGIN IMMEDIATE must serialise their writes without errors.
func TestConcurrentHandles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "agent.db")
	dbs := make([]*DB, 2)
	for i := range dbs {
		db, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		dbs[i] = db
	}

	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i, db := range dbs {
		runID := fmt.Sprintf("run-%d", i)
		owner := fmt.Sprintf("host/%d/abcd", 1000+i)
		if err := db.CreateRun(ctx, &Run{ID: runID}, owner, time.Minute); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := int64(1); seq <= n; seq++ {
				e := event.New(event.Heartbeat, nil)
				e.RunID, e.Seq = runID, seq
				if err := db.AppendEvents(ctx, []event.Event{e}); err != nil {
					errs <- err
				}
				if err := db.RenewLease(ctx, runID, owner, time.Minute); err != nil {
					errs <- err
				}
				if _, err := db.ListEvents(ctx, runID, 0, 0); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range dbs {
		evs, err := dbs[0].ListEvents(ctx, fmt.Sprintf("run-%d", i), 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != n {
			t.Errorf("run-%d has %d events, want %d", i, len(evs), n)
		}
	}
}

// BenchmarkOpen measures what every CLI invocation pays: opening an
// up-to-date database and running one read.
func BenchmarkOpen(b *testing.B) {
	path := filepath.Join(b.TempDir(), "agent.db")
	db, err := Open(path)
	if err != nil {
		b.Fatal(err)
	}
	db.Close()
	for b.Loop() {
		db, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := db.ListRuns(context.Background(), 1); err != nil {
			b.Fatal(err)
		}
		db.Close()
	}
}

// oldDatabase makes a database as a binary that knew only the migrations
// before the one named next left it: only its rw handle is open, for the
// test to fill with old rows and close before Open migrates the rest.
func oldDatabase(t *testing.T, next string) (old *DB, path string) {
	t.Helper()
	sqliteOnly(t)
	path = filepath.Join(t.TempDir(), "agent.db")
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	rw, err := sql.Open("sqlite3", path+"?_journal_mode=WAL&_foreign_keys=on")
	if err != nil {
		t.Fatal(err)
	}
	old = &DB{rw: &pool{db: rw, write: true}}
	for _, m := range ms {
		if m.name == next {
			return old, path
		}
		if err := old.applyMigration(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatalf("no migration %s", next)
	return nil, ""
}

// migrationCount is the schema version a fully migrated database has.
func migrationCount(t *testing.T) int {
	t.Helper()
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	return len(ms)
}

// migratedFrom opens, migrated, a database that oldDatabase made and
// rows, SQL statements, filled.
func migratedFrom(t *testing.T, next string, rows ...string) *DB {
	t.Helper()
	old, path := oldDatabase(t, next)
	for _, q := range rows {
		if _, err := old.rw.db.Exec(q); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}
	old.rw.Close()
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
