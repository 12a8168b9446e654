// Package store holds all SQL of agent: the database (a SQLite file, or
// PostgreSQL for many machines), its migrations, run leases, and the event
// journal with the projections built from it.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	_ "github.com/mattn/go-sqlite3" // registers the "sqlite3" driver
)

// ErrNotFound is returned when a row asked for by id does not exist.
var ErrNotFound = errors.New("not found")

// DB is the agent database. It is safe for concurrent use, and several
// processes may open the same file.
type DB struct {
	// Writes go through one connection whose every transaction is
	// BEGIN IMMEDIATE, so writers in this process queue in Go rather than
	// sleeping in SQLite's busy handler; other processes wait up to the
	// busy timeout.
	// On PostgreSQL every write transaction takes one advisory lock
	// first (dialect.go), to the same effect.
	rw *pool
	// Reads use deferred transactions: in WAL mode they see a snapshot
	// and never take the write lock, so a reader never stalls a run.
	ro *pool

	// Now is the clock. Tests replace it to move leases through time.
	Now func() time.Time
	// OwnerDead reports whether a lease owner is provably gone, so its
	// lease can be taken before it expires. Tests replace it.
	OwnerDead func(owner string) bool

	file string // the database file, or the PostgreSQL URL without its password
	pg   bool   // the store is on PostgreSQL
	// location is what Open was given, for another handle on the store.
	location string
	marker   string // this handle's open marker (health.go), removed by Close
}

// busyTimeout is how long a write waits for another process's write.
const busyTimeout = 5 * time.Second

// Open opens the store at location and brings its schema up to date: a
// PostgreSQL URL (postgres://…), or else the path of a SQLite file,
// created if needed. It is cheap on an up-to-date database: connections
// are opened lazily and only the schema version is read.
func Open(location string) (*DB, error) {
	if IsURL(location) {
		return openPostgres(location)
	}
	return openSQLite(location)
}

func openSQLite(path string) (*DB, error) {
	if path == "" {
		return nil, errors.New("open store: empty path")
	}
	// go-sqlite3 reads options after the first '?', so such a path
	// would be cut short.
	if strings.Contains(path, "?") {
		return nil, fmt.Errorf("open store %s: path must not contain '?'", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		problem := err.Error()
		var pe *os.PathError
		if errors.As(err, &pe) {
			problem = "cannot create the directory " + pe.Path + ": " + pe.Err.Error()
		}
		return nil, &UnusableError{Path: path, Problem: problem, Fix: fixHome}
	}
	private(path)
	common := fmt.Sprintf("_busy_timeout=%d&_foreign_keys=on&_synchronous=FULL", busyTimeout.Milliseconds())
	rw, err := sql.Open("sqlite3", path+"?_journal_mode=WAL&_txlock=immediate&"+common)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	rw.SetMaxOpenConns(1)
	// The read pool leaves journal_mode alone: the write pool sets WAL,
	// which is persistent, before any read runs.
	ro, err := sql.Open("sqlite3", path+"?_txlock=deferred&_query_only=on&"+common)
	if err != nil {
		rw.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	db := &DB{rw: &pool{db: rw, write: true, file: path}, ro: &pool{db: ro, file: path}, Now: time.Now, OwnerDead: ownerDead, file: path, location: path}
	var dead []string
	db.marker, dead = claimMarker(path)
	if err := db.migrate(context.Background()); err != nil {
		db.Close()
		err = unusable(path, err)
		var u *UnusableError
		if errors.As(err, &u) {
			if u.Path == "" {
				u.Path = path
			}
			return nil, u
		}
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	if len(dead) > 0 {
		// A process died with the store open: check it before use.
		if err := db.Check(context.Background(), false); err != nil {
			db.Close()
			return nil, err
		}
		for _, m := range dead {
			os.Remove(m)
		}
	}
	return db, nil
}

// private makes the database file, and the -wal and -shm files SQLite
// keeps beside it, readable and writable by the user alone, whatever the
// umask or the directory's mode: they hold every prompt, reply and tool
// output. SQLite gives the -wal and -shm files it creates the database
// file's mode, so creating that file 0600 before SQLite does is enough
// for a new store; an existing store's files are narrowed. It is best
// effort: a file that cannot be opened is left for SQLite to report, and
// one owned by another user keeps its mode.
func private(path string) {
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		return
	}
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o077 != 0 {
		_ = f.Chmod(fi.Mode().Perm() &^ 0o077)
	}
	f.Close()
	for _, side := range []string{path + "-wal", path + "-shm"} {
		if fi, err := os.Lstat(side); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o077 != 0 {
			_ = os.Chmod(side, fi.Mode().Perm()&^0o077)
		}
	}
}

// Close closes the database.
func (db *DB) Close() error {
	if db.marker != "" {
		os.Remove(db.marker)
	}
	return errors.Join(db.rw.Close(), db.ro.Close())
}

// now returns the current time at the precision the database keeps, so a
// value set on a struct equals the one read back.
func (db *DB) now() time.Time {
	return db.Now().UTC().Truncate(time.Microsecond)
}

// timeLayout is fixed-width, so comparing stored strings compares times.
const timeLayout = "2006-01-02T15:04:05.000000Z"

func formatTime(t time.Time) string {
	return t.UTC().Format(timeLayout)
}

// nullTime stores the zero time as NULL.
func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return formatTime(t)
}

// nullString stores "" as NULL, for optional references and ids.
func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// timeValue scans a stored time; NULL or "" is the zero time.
type timeValue struct{ t *time.Time }

func (v timeValue) Scan(src any) error {
	var s string
	switch x := src.(type) {
	case nil:
		*v.t = time.Time{}
		return nil
	case string:
		s = x
	case []byte:
		s = string(x)
	default:
		return fmt.Errorf("scan time: unexpected %T", src)
	}
	if s == "" {
		*v.t = time.Time{}
		return nil
	}
	t, err := time.Parse(timeLayout, s)
	if err != nil {
		return fmt.Errorf("scan time: %w", err)
	}
	*v.t = t
	return nil
}

// prefixMatch returns the one id in table that starts with prefix, like
// git's short hashes: any length will do as long as one id has it. No
// match is ErrNotFound; several are ErrAmbiguous, saying how many and
// naming a few. Callers try the exact id first.
func prefixMatch(ctx context.Context, tx *txn, noun, table, prefix string) (string, error) {
	if prefix == "" {
		return "", fmt.Errorf("%s %q: %w", noun, prefix, ErrNotFound)
	}
	// substr, not LIKE: ids are matched literally and case-sensitively.
	const where = ` WHERE substr(id, 1, length(CAST(? AS TEXT))) = ?`
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+table+where, prefix, prefix).Scan(&n); err != nil {
		return "", fmt.Errorf("get %s %s: %w", noun, prefix, err)
	}
	if n == 0 {
		return "", fmt.Errorf("%s %s: %w", noun, prefix, ErrNotFound)
	}
	rows, err := tx.QueryContext(ctx,
		`SELECT id FROM `+table+where+` ORDER BY id LIMIT ?`, prefix, prefix, ambiguousShown)
	if err != nil {
		return "", fmt.Errorf("get %s %s: %w", noun, prefix, err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return "", fmt.Errorf("get %s %s: %w", noun, prefix, err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("get %s %s: %w", noun, prefix, err)
	}
	if n == 1 && len(ids) == 1 {
		return ids[0], nil
	}
	if n > len(ids) {
		ids = append(ids, "…")
	}
	return "", fmt.Errorf("%s id prefix %s is %w: %d %ss match (%s); give more of the id",
		noun, prefix, ErrAmbiguous, n, noun, strings.Join(ids, ", "))
}

// noLimit is a LIMIT that keeps every row, in both dialects (SQLite's -1
// is an error to PostgreSQL).
const noLimit = math.MaxInt64

// ambiguousShown is how many matches an ambiguous prefix's error names.
const ambiguousShown = 5

// scanner is a row to scan: *row or *rows.
type scanner interface{ Scan(...any) error }

// scanAll runs query in tx and scans every row with scan.
func scanAll[T any](ctx context.Context, tx *txn, scan func(scanner) (T, error), query string, args ...any) ([]T, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// readAll is scanAll in a read-only transaction of its own; what names
// the read in errors.
func readAll[T any](ctx context.Context, db *DB, what string, scan func(scanner) (T, error), query string, args ...any) ([]T, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer tx.Rollback()
	out, err := scanAll(ctx, tx, scan, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, tx.Commit()
}
