package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mattn/go-sqlite3"
)

// UnusableError is a store this machine will not let agent use: its
// directory cannot be created or written, the disk is full, or the file
// is not a healthy database. It says what to do (docs/PROTOCOL.md#exit-codes, exit 5).
type UnusableError struct {
	Path    string // the database file, or the directory that failed
	Problem string
	Fix     string
}

func (e *UnusableError) Error() string {
	return fmt.Sprintf("cannot use the store %s: %s; %s", e.Path, e.Problem, e.Fix)
}

// fixHome is the way out when AGENT_HOME cannot be written.
const fixHome = "make it writable, or set AGENT_HOME to a directory you own"

// unusable explains why the database at path could not be opened: the
// cause SQLite reports ("unable to open database file: no such file or
// directory") is often not the real one, so the directory is tried too.
func unusable(path string, err error) error {
	var lite sqlite3.Error
	if !errors.As(err, &lite) {
		return err
	}
	switch lite.Code {
	case sqlite3.ErrNotADB, sqlite3.ErrCorrupt:
		return &UnusableError{Path: path, Problem: "it is not a healthy SQLite database (" + lite.Error() + ")",
			Fix: fmt.Sprintf("move it aside (mv %s %s.broken) to start a new one, or restore a backup", path, path)}
	case sqlite3.ErrFull:
		return &UnusableError{Path: path, Problem: "the disk is full", Fix: "free some space on it"}
	case sqlite3.ErrCantOpen, sqlite3.ErrPerm, sqlite3.ErrReadonly, sqlite3.ErrIoErr, sqlite3.ErrAuth:
		dir := filepath.Dir(path)
		if werr := probeWritable(dir); werr != nil {
			return &UnusableError{Path: dir, Problem: "the directory is not writable (" + werr.Error() + ")", Fix: fixHome}
		}
		return &UnusableError{Path: path, Problem: lite.Error(), Fix: fixHome}
	}
	return err
}

// damaged is err, or, when SQLite says the file is damaged or is not a
// database, an *UnusableError naming file and the way out: whichever
// statement finds the damage, every command then exits 5 saying so.
func damaged(file string, err error) error {
	var lite sqlite3.Error
	if err == nil || file == "" || !errors.As(err, &lite) {
		return err
	}
	if lite.Code != sqlite3.ErrCorrupt && lite.Code != sqlite3.ErrNotADB {
		return err
	}
	return unusable(file, err)
}

// probeWritable tries to create a file in dir.
func probeWritable(dir string) error {
	f, err := os.CreateTemp(dir, ".agent-probe-*")
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return pe.Err
		}
		return err
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}
