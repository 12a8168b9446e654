package store

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"

	"agent/store/pgtest"
)

// TestPostgresSchemaMatchesSQLite builds the schema twice, with the
// SQLite migrations (as Open does) and with the PostgreSQL ones on a real
// server, and compares what the Go code relies on: the tables, their
// columns in order with type (integer, text or bytes) and NOT NULL, primary keys,
// foreign keys with their ON DELETE, and the named indexes with their
// columns, uniqueness and whether they are partial, and UNIQUE
// constraints. CHECK constraints are not compared: each dialect keeps
// them as its own text.
func TestPostgresSchemaMatchesSQLite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	lite, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	pg, err := postgresMigrations()
	if err != nil {
		t.Fatal(err)
	}
	names := func(ms []migration) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.name)
		}
		return out
	}
	if !slices.Equal(names(lite), names(pg)) {
		t.Fatalf("migrations differ:\nSQLite:     %v\nPostgreSQL: %v", names(lite), names(pg))
	}

	db, err := Open(filepath.Join(t.TempDir(), "agent.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	want, err := sqliteSchema(ctx, db.rw.db)
	if err != nil {
		t.Fatal(err)
	}

	pdb, err := sql.Open("pgx", pgtest.Start(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pdb.Close()
	var version string
	if err := pdb.QueryRowContext(ctx, "SELECT version()").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(version, "PostgreSQL ") {
		t.Fatalf("version() = %q: not a PostgreSQL server", version)
	}
	t.Logf("against %s", version)
	for _, m := range pg {
		if err := applyPostgres(ctx, pdb, m); err != nil {
			t.Fatalf("PostgreSQL migration %s: %v", m.name, err)
		}
	}
	got, err := postgresSchema(ctx, pdb)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) < 100 || len(got) < 100 {
		t.Fatalf("read too little of the schemas (%d and %d facts)", len(want), len(got))
	}

	if only := minus(want, got); len(only) > 0 {
		t.Errorf("only in SQLite's schema:\n\t%s", strings.Join(only, "\n\t"))
	}
	if only := minus(got, want); len(only) > 0 {
		t.Errorf("only in PostgreSQL's schema:\n\t%s", strings.Join(only, "\n\t"))
	}
	t.Logf("compared %d facts of the schema", len(want))
	if os.Getenv("SCHEMA_FACTS") != "" {
		t.Logf("\n%s", strings.Join(want, "\n"))
	}
}

// applyPostgres runs one migration in a transaction of its own.
func applyPostgres(ctx context.Context, db *sql.DB, m migration) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, m.sql); err != nil {
		return err
	}
	return tx.Commit()
}

// minus returns the facts of a that b lacks.
func minus(a, b []string) []string {
	var out []string
	for _, f := range a {
		if _, ok := slices.BinarySearch(b, f); !ok {
			out = append(out, f)
		}
	}
	return out
}

// typeClass names a column's type as both dialects can agree on it.
func typeClass(t string) string {
	switch strings.ToLower(t) {
	case "integer", "bigint":
		return "integer"
	case "text":
		return "text"
	case "blob", "bytea":
		return "bytes"
	}
	return strings.ToLower(t)
}

// sqliteSchema lists the facts of a SQLite schema, sorted.
func sqliteSchema(ctx context.Context, db *sql.DB) ([]string, error) {
	var facts []string
	tables, err := strings0(ctx, db, `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'`)
	if err != nil {
		return nil, err
	}
	for _, table := range tables {
		facts = append(facts, "table "+table)
		rows, err := db.QueryContext(ctx, `SELECT cid, name, type, "notnull", pk FROM pragma_table_info(?) ORDER BY cid`, table)
		if err != nil {
			return nil, err
		}
		var pk []string
		var pkAt []int // the position of each of pk in the primary key
		for rows.Next() {
			var cid, pkPos int
			var name, typ string
			var notNull bool
			if err := rows.Scan(&cid, &name, &typ, &notNull, &pkPos); err != nil {
				rows.Close()
				return nil, err
			}
			// SQLite lets a primary key other than INTEGER PRIMARY KEY
			// hold NULL unless it says NOT NULL; no row here ever does, and
			// PostgreSQL's primary keys are NOT NULL.
			facts = append(facts, column(table, cid+1, name, typ, notNull || pkPos > 0))
			if pkPos > 0 {
				pk = append(pk, name)
				pkAt = append(pkAt, pkPos)
			}
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
		if len(pk) > 0 {
			ordered := make([]string, len(pk))
			for i, at := range pkAt {
				ordered[at-1] = pk[i]
			}
			facts = append(facts, fmt.Sprintf("table %s: primary key (%s)", table, strings.Join(ordered, ", ")))
		}

		rows, err = db.QueryContext(ctx, `SELECT "from", "table", "to", on_delete FROM pragma_foreign_key_list(?)`, table)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var from, ref, to, onDelete string
			if err := rows.Scan(&from, &ref, &to, &onDelete); err != nil {
				rows.Close()
				return nil, err
			}
			facts = append(facts, foreignKey(table, from, ref, to, onDelete))
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}

		// Indexes: origin c is CREATE INDEX, u a UNIQUE constraint, whose
		// index each dialect names its own way (sqlite_autoindex_*), and pk
		// the primary key, already listed.
		rows, err = db.QueryContext(ctx, `SELECT name, origin, "unique", partial FROM pragma_index_list(?) WHERE origin != 'pk'`, table)
		if err != nil {
			return nil, err
		}
		type index struct {
			name, origin    string
			unique, partial bool
		}
		var indexes []index
		for rows.Next() {
			var ix index
			if err := rows.Scan(&ix.name, &ix.origin, &ix.unique, &ix.partial); err != nil {
				rows.Close()
				return nil, err
			}
			indexes = append(indexes, ix)
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
		for _, ix := range indexes {
			cols, err := strings0(ctx, db, `SELECT name FROM pragma_index_info(?) ORDER BY seqno`, ix.name)
			if err != nil {
				return nil, err
			}
			if ix.origin == "u" {
				facts = append(facts, uniqueFact(table, cols))
			} else {
				facts = append(facts, indexFact(table, ix.name, cols, ix.unique, ix.partial))
			}
		}
	}
	slices.Sort(facts)
	return facts, nil
}

// postgresSchema lists the facts of the public schema of a PostgreSQL
// database, sorted, in the words sqliteSchema uses.
func postgresSchema(ctx context.Context, db *sql.DB) ([]string, error) {
	var facts []string
	tables, err := strings0(ctx, db, `SELECT tablename FROM pg_tables WHERE schemaname = 'public'`)
	if err != nil {
		return nil, err
	}
	for _, table := range tables {
		facts = append(facts, "table "+table)
	}

	// A column's position counts the table's live columns, as SQLite's cid.
	rows, err := db.QueryContext(ctx, `
		SELECT c.relname, row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum), a.attname,
			format_type(a.atttypid, a.atttypmod), a.attnotnull
		FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'
		JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
			AND a.attname != 'rowid' -- SQLite's implicit column, made explicit (0012)
		WHERE c.relkind = 'r'`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var table, name, typ string
		var pos int
		var notNull bool
		if err := rows.Scan(&table, &pos, &name, &typ, &notNull); err != nil {
			rows.Close()
			return nil, err
		}
		facts = append(facts, column(table, pos, name, typ, notNull))
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}

	rows, err = db.QueryContext(ctx, `
		SELECT c.conrelid::regclass::text, c.contype::text, string_agg(a.attname, ', ' ORDER BY k.ord)
		FROM pg_constraint c
		CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
		WHERE c.contype IN ('p', 'u') AND c.connamespace = 'public'::regnamespace
		GROUP BY c.oid, c.conrelid, c.contype`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var table, kind, cols string
		if err := rows.Scan(&table, &kind, &cols); err != nil {
			rows.Close()
			return nil, err
		}
		if kind == "p" {
			facts = append(facts, fmt.Sprintf("table %s: primary key (%s)", table, cols))
		} else {
			facts = append(facts, uniqueFact(table, strings.Split(cols, ", ")))
		}
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}

	rows, err = db.QueryContext(ctx, `
		SELECT c.conrelid::regclass::text, a.attname, c.confrelid::regclass::text, af.attname, c.confdeltype
		FROM pg_constraint c
		CROSS JOIN LATERAL unnest(c.conkey, c.confkey) AS k(attnum, refnum)
		JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
		JOIN pg_attribute af ON af.attrelid = c.confrelid AND af.attnum = k.refnum
		WHERE c.contype = 'f' AND c.connamespace = 'public'::regnamespace`)
	if err != nil {
		return nil, err
	}
	actions := map[string]string{"a": "NO ACTION", "r": "RESTRICT", "c": "CASCADE", "n": "SET NULL", "d": "SET DEFAULT"}
	for rows.Next() {
		var table, from, ref, to, action string
		if err := rows.Scan(&table, &from, &ref, &to, &action); err != nil {
			rows.Close()
			return nil, err
		}
		facts = append(facts, foreignKey(table, from, ref, to, actions[action]))
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}

	// Indexes made by CREATE INDEX: not those behind a PRIMARY KEY or
	// UNIQUE constraint, listed above.
	rows, err = db.QueryContext(ctx, `
		SELECT t.relname, i.relname, string_agg(a.attname, ',' ORDER BY k.ord), x.indisunique, x.indpred IS NOT NULL
		FROM pg_index x
		JOIN pg_class i ON i.oid = x.indexrelid
		JOIN pg_class t ON t.oid = x.indrelid
		JOIN pg_namespace n ON n.oid = t.relnamespace AND n.nspname = 'public'
		CROSS JOIN LATERAL unnest(x.indkey) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum
		WHERE NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid)
		GROUP BY t.relname, i.relname, x.indisunique, x.indpred IS NOT NULL`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var table, name, cols string
		var unique, partial bool
		if err := rows.Scan(&table, &name, &cols, &unique, &partial); err != nil {
			rows.Close()
			return nil, err
		}
		facts = append(facts, indexFact(table, name, strings.Split(cols, ","), unique, partial))
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	slices.Sort(facts)
	return facts, nil
}

func column(table string, pos int, name, typ string, notNull bool) string {
	f := fmt.Sprintf("table %s: column %d %s %s", table, pos, name, typeClass(typ))
	if notNull {
		f += " NOT NULL"
	}
	return f
}

func foreignKey(table, from, ref, to, onDelete string) string {
	return fmt.Sprintf("table %s: foreign key %s references %s (%s) on delete %s", table, from, ref, to, strings.ToUpper(onDelete))
}

func uniqueFact(table string, cols []string) string {
	return fmt.Sprintf("table %s: unique (%s)", table, strings.Join(cols, ", "))
}

func indexFact(table, name string, cols []string, unique, partial bool) string {
	f := fmt.Sprintf("table %s: index %s (%s)", table, name, strings.Join(cols, ", "))
	if unique {
		f += " unique"
	}
	if partial {
		f += " partial"
	}
	return f
}

// strings0 returns a query's single text column.
func strings0(ctx context.Context, db *sql.DB, query string, args ...any) ([]string, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// TestPostgresDataMigrationsMatchSQLite fills a database as the binary
// before a data migration left it, in both dialects with the same rows,
// migrates both, and compares what the migration wrote.
func TestPostgresDataMigrationsMatchSQLite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg, err := postgresMigrations()
	if err != nil {
		t.Fatal(err)
	}
	server := pgtest.Start(t)
	admin, err := sql.Open("pgx", server)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()

	const at = `'2026-11-22T08:00:00.000000Z'`
	cases := []struct {
		next  string
		rows  []string
		query string
	}{
		{"0008_fork_runs.sql", []string{
			`INSERT INTO sessions (id, title, created_at, updated_at) VALUES ('src', '', '2026-11-22T08:00:00.000000Z', '2026-11-22T08:00:00.000000Z')`,
			`INSERT INTO sessions (id, title, parent_id, forked_from_seq, created_at, updated_at) VALUES ('fork', '', 'src', 0, '2026-11-22T08:00:02.000000Z', '2026-11-22T08:00:02.000000Z')`,
			`INSERT INTO runs (id, kind, session_id, status, prompt, created_at, updated_at)
				VALUES ('real-1', 'run', 'src', 'completed', 'forked from session x at seq 3', '2026-11-22T08:00:01.000000Z', '2026-11-22T08:00:01.000000Z')`,
			`INSERT INTO runs (id, kind, session_id, status, prompt, turns, created_at, updated_at)
				VALUES ('synthetic', 'run', 'fork', 'completed', 'forked from session src at seq 9', 10, '2026-11-22T08:00:02.000000Z', '2026-11-22T08:00:02.000000Z')`,
			`INSERT INTO runs (id, kind, session_id, status, prompt, created_at, updated_at)
				VALUES ('real-2', 'run', 'fork', 'completed', 'forked from session src at seq 9', '2026-11-22T08:00:03.000000Z', '2026-11-22T08:00:03.000000Z')`,
		}, `SELECT id || ' ' || fork FROM runs ORDER BY id`},
		{"0009_job_sessions.sql", []string{
			`INSERT INTO scheduled_jobs (id, name, cron_expr, timezone, prompt_template, created_at, updated_at, next_run_at)
				VALUES ('job-1', 'standup', '@daily', 'UTC', 'p', ` + at + `, ` + at + `, ` + at + `)`,
			`INSERT INTO job_runs (id, job_id, run_id, scheduled_for, status) VALUES ('jr-1', 'job-1', 'tick-run', ` + at + `, 'completed')`,
			`INSERT INTO sessions (id, title, created_at, updated_at) VALUES ('tick', 'job standup · 2026-11-22 08:00:00 UTC', ` + at + `, ` + at + `)`,
			`INSERT INTO runs (id, kind, session_id, status, prompt, idempotency_key, created_at, updated_at)
				VALUES ('tick-run', 'run', 'tick', 'completed', 'p', 'job-run:jr-1', ` + at + `, ` + at + `)`,
			`INSERT INTO sessions (id, title, created_at, updated_at) VALUES ('orphan', 'job gone · 2026-11-22 08:00:00 UTC', ` + at + `, ` + at + `)`,
			`INSERT INTO runs (id, kind, session_id, status, prompt, idempotency_key, created_at, updated_at)
				VALUES ('orphan-run', 'run', 'orphan', 'completed', 'p', 'job-run:jr-gone', ` + at + `, ` + at + `)`,
			`INSERT INTO sessions (id, title, created_at, updated_at) VALUES ('mine', 'job search · notes', ` + at + `, ` + at + `)`,
		}, `SELECT id || ' ' || COALESCE(job_id, 'NULL') FROM sessions ORDER BY id`},
	}
	for i, c := range cases {
		lite := migratedFrom(t, c.next, c.rows...)
		want, err := strings0(ctx, lite.rw.db, c.query)
		if err != nil {
			t.Fatal(err)
		}

		name := fmt.Sprintf("data%d", i)
		if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
			t.Fatal(err)
		}
		pdb, err := sql.Open("pgx", strings.Replace(server, "/postgres?", "/"+name+"?", 1))
		if err != nil {
			t.Fatal(err)
		}
		defer pdb.Close()
		filled := false
		for _, m := range pg {
			if m.name == c.next {
				for _, q := range c.rows {
					if _, err := pdb.ExecContext(ctx, q); err != nil {
						t.Fatalf("%v\n%s", err, q)
					}
				}
				filled = true
			}
			if err := applyPostgres(ctx, pdb, m); err != nil {
				t.Fatalf("PostgreSQL migration %s: %v", m.name, err)
			}
		}
		if !filled {
			t.Fatalf("no PostgreSQL migration %s", c.next)
		}
		got, err := strings0(ctx, pdb, c.query)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("after %s:\nPostgreSQL: %q\nSQLite:     %q", c.next, got, want)
		}
		t.Logf("after %s: %q", c.next, got)
	}
}

// Processes that open a new database at the same moment (a gateway and
// its workers started together) all get a migrated store.
func TestPostgresFirstOpensAtOnce(t *testing.T) {
	t.Parallel()
	dsn := pgtest.Database(t, pgtest.Start(t), "")
	const opens = 6
	errs := make(chan error, opens)
	for range opens {
		go func() {
			db, err := Open(dsn)
			if err == nil {
				err = db.Close()
			}
			errs <- err
		}()
	}
	for range opens {
		if err := <-errs; err != nil {
			t.Errorf("open: %v", err)
		}
	}
}
