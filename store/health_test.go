package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"agent/event"
)

// A database damaged while a process died with it open is found by the
// next Open, not by the runs that keep writing into it.
func TestOpenChecksAfterACrash(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "agent.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	createRun(t, db, "run-1")
	evs := make([]event.Event, 0, 3000)
	for i := range 3000 {
		e := event.New(event.Warning, event.WarningData{Message: fmt.Sprintf("filler %04d %s", i, strings.Repeat("x", 100))})
		e.RunID, e.Seq = "run-1", int64(i+1)
		evs = append(evs, e)
	}
	if err := db.AppendEvents(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// Healthy, and no process died: Open does not check.
	db, err = Open(path)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	db.Close()

	// Damage a page in the middle, then leave the marker of a process
	// that died with the store open.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	if _, err := f.WriteAt([]byte(strings.Repeat("\xff", 4096)), (fi.Size()/4096/2)*4096); err != nil {
		t.Fatal(err)
	}
	f.Close()
	// Nothing says a process died: Open stays cheap and does not look.
	if db, err := Open(path); err != nil {
		t.Fatalf("open without a crash behind it: %v", err)
	} else {
		db.Close()
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(markerDir(path), fmt.Sprintf("%d-dead", gone.Process.Pid)), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Open(path)
	var bad *UnusableError
	if !errors.As(err, &bad) || !strings.Contains(bad.Problem+bad.Fix, "mv "+path) {
		t.Fatalf("Open after a crash over a damaged page: %v, want it reported damaged", err)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	db := openTest(t)
	createRun(t, db, "run-1")
	for _, full := range []bool{false, true} {
		if err := db.Check(context.Background(), full); err != nil {
			t.Errorf("Check(full=%v) of a healthy store: %v", full, err)
		}
	}
}

// Damage that Open does not look for (no process died) is found by the
// first statement that reads the damaged page, read or write: it is an
// *UnusableError naming the file and the way out, as Open's would be.
func TestDamageFoundByAnyStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "agent.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		createRun(t, db, fmt.Sprintf("run-%d", i))
	}
	db.Close()
	damageTable(t, path, "runs")

	db, err = Open(path)
	if err != nil {
		t.Fatalf("open: %v (the schema is whole: Open should not see the damage)", err)
	}
	defer db.Close()
	_, listErr := db.ListRuns(ctx, 0)
	createErr := db.CreateRun(ctx, &Run{ID: "new", Prompt: "p"}, "", 0)
	for what, err := range map[string]error{"list runs": listErr, "create run": createErr} {
		var bad *UnusableError
		if !errors.As(err, &bad) || bad.Path != path || !strings.Contains(err.Error(), "mv "+path+" "+path+".broken") {
			t.Errorf("%s in a damaged store: %v, want an *UnusableError naming %s and the way out", what, err, path)
		}
	}
}

// damageTable overwrites the root page of a table of the SQLite file at
// path, as a failing disk would.
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
