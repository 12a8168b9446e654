package store

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"sync"
)

// The store speaks two dialects of SQL: SQLite's, the zero-setup default,
// and PostgreSQL's, for many machines on one database (docs/SCHEMA.md#sqlite-and-postgresql).
// Queries are written once, with ? placeholders and the SQL both share;
// the few places that differ ask the transaction (txn.pg).

// writeLock is the key of the advisory lock every PostgreSQL write
// transaction takes first. It serialises writers as SQLite's BEGIN
// IMMEDIATE does, so every rule written for one writer at a time (seqs
// read and assigned, leases tested and taken, ticks claimed once) holds
// across processes and machines unchanged. Readers never take it.
const writeLock = 0x6167656e74 // "agent"

// pool is one of the DB's connection pools: its queries are rebound to
// the dialect, and on PostgreSQL a write pool's transactions take the
// write lock.
type pool struct {
	db    *sql.DB
	pg    bool
	write bool
	file  string // the SQLite file, named when SQLite finds it damaged
}

// txn is a transaction of a pool, speaking its dialect.
type txn struct {
	tx    *sql.Tx
	pg    bool
	write bool // of the write pool: it holds the write lock
	file  string
}

// BeginTx starts a transaction: a write (BEGIN IMMEDIATE, or the advisory
// write lock) on the write pool, a consistent snapshot on the read pool.
func (p *pool) BeginTx(ctx context.Context, opts *sql.TxOptions) (*txn, error) {
	if p.pg && opts == nil {
		opts = &sql.TxOptions{}
		if !p.write {
			// One snapshot for every statement, as a SQLite read has.
			opts = &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}
		}
	}
	tx, err := p.db.BeginTx(ctx, opts)
	if err != nil {
		return nil, damaged(p.file, err)
	}
	if p.pg && p.write {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, writeLock); err != nil {
			tx.Rollback()
			return nil, err
		}
	}
	return &txn{tx: tx, pg: p.pg, write: p.write, file: p.file}, nil
}

// Every error of a query passes through damaged, so a damaged SQLite file
// is an *UnusableError naming it whichever statement finds the damage.

func (p *pool) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	res, err := p.db.ExecContext(ctx, bind(p.pg, query), values(p.pg, args)...)
	return res, damaged(p.file, err)
}

func (p *pool) QueryContext(ctx context.Context, query string, args ...any) (*rows, error) {
	r, err := p.db.QueryContext(ctx, bind(p.pg, query), values(p.pg, args)...)
	if err != nil {
		return nil, damaged(p.file, err)
	}
	return &rows{Rows: r, file: p.file}, nil
}

func (p *pool) QueryRowContext(ctx context.Context, query string, args ...any) *row {
	return &row{row: p.db.QueryRowContext(ctx, bind(p.pg, query), values(p.pg, args)...), file: p.file}
}

func (p *pool) Close() error { return p.db.Close() }

func (t *txn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	res, err := t.tx.ExecContext(ctx, bind(t.pg, query), values(t.pg, args)...)
	return res, damaged(t.file, err)
}

func (t *txn) QueryContext(ctx context.Context, query string, args ...any) (*rows, error) {
	r, err := t.tx.QueryContext(ctx, bind(t.pg, query), values(t.pg, args)...)
	if err != nil {
		return nil, damaged(t.file, err)
	}
	return &rows{Rows: r, file: t.file}, nil
}

func (t *txn) QueryRowContext(ctx context.Context, query string, args ...any) *row {
	return &row{row: t.tx.QueryRowContext(ctx, bind(t.pg, query), values(t.pg, args)...), file: t.file}
}

func (t *txn) PrepareContext(ctx context.Context, query string) (*stmt, error) {
	s, err := t.tx.PrepareContext(ctx, bind(t.pg, query))
	if err != nil {
		return nil, damaged(t.file, err)
	}
	return &stmt{stmt: s, pg: t.pg, file: t.file}, nil
}

func (t *txn) Commit() error   { return damaged(t.file, t.tx.Commit()) }
func (t *txn) Rollback() error { return t.tx.Rollback() }

// rows are a query's rows; their errors pass through damaged.
type rows struct {
	*sql.Rows
	file string
}

func (r *rows) Scan(dest ...any) error { return damaged(r.file, r.Rows.Scan(dest...)) }
func (r *rows) Err() error             { return damaged(r.file, r.Rows.Err()) }

// row is a query's one row; its error passes through damaged.
type row struct {
	row  *sql.Row
	file string
}

func (r *row) Scan(dest ...any) error { return damaged(r.file, r.row.Scan(dest...)) }

// stmt is a statement prepared in a transaction.
type stmt struct {
	stmt *sql.Stmt
	pg   bool
	file string
}

func (s *stmt) ExecContext(ctx context.Context, args ...any) (sql.Result, error) {
	res, err := s.stmt.ExecContext(ctx, values(s.pg, args)...)
	return res, damaged(s.file, err)
}

func (s *stmt) Close() error { return s.stmt.Close() }

// greatest is SQL for the larger of two values: SQLite's two-argument
// MAX, PostgreSQL's GREATEST.
func (t *txn) greatest(a, b string) string {
	if t.pg {
		return "GREATEST(" + a + ", " + b + ")"
	}
	return "MAX(" + a + ", " + b + ")"
}

// values passes Go bools to PostgreSQL as the 0 and 1 SQLite stores for
// them: both schemas keep flags in integer columns.
func values(pg bool, args []any) []any {
	if !pg {
		return args
	}
	var out []any
	for i, a := range args {
		b, ok := a.(bool)
		if !ok {
			continue
		}
		if out == nil {
			out = append([]any(nil), args...)
		}
		out[i] = 0
		if b {
			out[i] = 1
		}
	}
	if out == nil {
		return args
	}
	return out
}

// bound caches rebound queries: the store's queries are constants, so
// the cache stays the size of the code.
var bound sync.Map // query -> PostgreSQL query

// bind rewrites query's ? placeholders as PostgreSQL's $1, $2…, leaving
// quoted strings, identifiers and -- comments alone; SQLite's queries pass
// unchanged.
func bind(pg bool, query string) string {
	if !pg || !strings.Contains(query, "?") {
		return query
	}
	if q, ok := bound.Load(query); ok {
		return q.(string)
	}
	var b strings.Builder
	b.Grow(len(query) + 16)
	n := 0
	var quote byte
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case quote != 0:
			if c == quote || quote == '-' && c == '\n' {
				quote = 0
			}
		case c == '-' && i+1 < len(query) && query[i+1] == '-':
			quote = '-' // to the end of the line
		case c == '\'' || c == '"':
			quote = c
		case c == '?':
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(c)
	}
	q := b.String()
	bound.Store(query, q)
	return q
}
