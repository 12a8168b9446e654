package store

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
)

// Migrations are numbered NNNN_name.sql, applied in order and never edited
// once shipped. PRAGMA user_version records how many have been applied.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

// postgresMigrationFS holds the same migrations in PostgreSQL's dialect,
// under the same names (docs/SCHEMA.md#sqlite-and-postgresql), applied by
// openPostgres and checked by a test to build the schema the SQLite ones
// build.
//
//go:embed migrations/postgres/*.sql
var postgresMigrationFS embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations returns the embedded SQLite migrations, checking they are
// numbered 1, 2, 3… with no gaps.
func loadMigrations() ([]migration, error) {
	return readMigrations(migrationFS, "migrations")
}

// postgresMigrations returns the embedded PostgreSQL migrations, checked
// the same way.
func postgresMigrations() ([]migration, error) {
	return readMigrations(postgresMigrationFS, "migrations/postgres")
}

// readMigrations reads dir's *.sql files in name order, checking they are
// numbered 1, 2, 3… with no gaps.
func readMigrations(fsys fs.FS, dir string) ([]migration, error) {
	names, err := fs.Glob(fsys, dir+"/*.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var ms []migration
	for i, name := range names {
		base := strings.TrimPrefix(name, dir+"/")
		num, _, _ := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if err != nil || v != i+1 {
			return nil, fmt.Errorf("migration %s: want number %04d", base, i+1)
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: base, sql: string(body)})
	}
	return ms, nil
}

// migrate applies the migrations this database has not seen yet.
func (db *DB) migrate(ctx context.Context) error {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	var current int
	if err := db.rw.QueryRowContext(ctx, "PRAGMA user_version").Scan(&current); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if current > len(ms) {
		return &UnusableError{Problem: fmt.Sprintf("its schema version %d is newer than this agent supports (%d)", current, len(ms)),
			Fix: "upgrade agent, or set AGENT_HOME to another directory"}
	}
	for _, m := range ms[current:] {
		if err := db.applyMigration(ctx, m); err != nil {
			return fmt.Errorf("migration %s: %w", m.name, err)
		}
	}
	return nil
}

// applyMigration runs one migration and bumps user_version in the same
// transaction, so a failed migration leaves no trace.
func (db *DB) applyMigration(ctx context.Context, m migration) error {
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()

	// Another process may have applied it while we waited for the lock.
	var current int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&current); err != nil {
		return err
	}
	if current >= m.version {
		return nil
	}
	if _, err := tx.ExecContext(ctx, m.sql); err != nil {
		return err
	}
	if strings.Contains(m.sql, "writable_schema") {
		// It edited a table's definition in place: every connection must
		// read the schema again (SQLite's "ALTER TABLE" page, section 7).
		var v int
		if err := tx.QueryRowContext(ctx, "PRAGMA schema_version").Scan(&v); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA schema_version = %d", v+1)); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", m.version)); err != nil {
		return err
	}
	return tx.Commit()
}
