package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// A process that has the store open leaves a marker beside it, removed
// when it closes the store. A marker whose process is gone says that
// process died with the store open: the next Open checks the database
// before using it, so damage is found then rather than while runs keep
// writing into it. Checking only then keeps a normal Open cheap.

// markerDir holds the markers of the store at path.
func markerDir(path string) string { return filepath.Join(filepath.Dir(path), ".open") }

// claimMarker leaves this handle's marker and reports whether an earlier
// process died with the store open, returning the markers it left.
func claimMarker(path string) (own string, dead []string) {
	dir := markerDir(path)
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		pidText, _, _ := strings.Cut(e.Name(), "-")
		pid, err := strconv.Atoi(pidText)
		if err == nil && pid > 0 && errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			dead = append(dead, filepath.Join(dir, e.Name()))
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", dead // best effort: without markers, crashes go unchecked
	}
	var nonce [4]byte
	_, _ = rand.Read(nonce[:])
	own = filepath.Join(dir, fmt.Sprintf("%d-%s", os.Getpid(), hex.EncodeToString(nonce[:])))
	if f, err := os.Create(own); err == nil {
		f.Close()
	} else {
		own = ""
	}
	return own, dead
}

// Check runs SQLite's check of the whole database (on PostgreSQL, that it answers): quick_check, or with
// full the slower integrity_check, which also checks that indexes match
// their tables. A damaged database is an *UnusableError.
func (db *DB) Check(ctx context.Context, full bool) error {
	if db.pg {
		// PostgreSQL keeps its own files whole; reaching it is the check.
		if err := db.ro.db.PingContext(ctx); err != nil {
			return &UnusableError{Path: db.file, Problem: "cannot reach it (" + pgProblem(err) + ")",
				Fix: "start the server, or correct AGENT_DATABASE_URL (or --database)"}
		}
		return nil
	}
	pragma := "PRAGMA quick_check"
	if full {
		pragma = "PRAGMA integrity_check"
	}
	rows, err := db.ro.QueryContext(ctx, pragma)
	if err != nil {
		return unusable(db.file, err)
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return err
		}
		if line != "ok" {
			problems = append(problems, line)
		}
	}
	if err := rows.Err(); err != nil {
		return unusable(db.file, err)
	}
	if len(problems) == 0 {
		return nil
	}
	more := ""
	if len(problems) > 1 {
		more = fmt.Sprintf(" (and %d more)", len(problems)-1)
	}
	return &UnusableError{Path: db.file, Problem: "it is damaged: " + problems[0] + more,
		Fix: fmt.Sprintf("restore a backup, or move it aside (mv %s %s.broken) to start a new one", db.file, db.file)}
}
