package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
)

// IsURL reports whether a store location is a PostgreSQL URL rather than
// the path of a SQLite file.
func IsURL(location string) bool {
	return strings.HasPrefix(location, "postgres://") || strings.HasPrefix(location, "postgresql://")
}

// Redact returns a store location fit to show: a URL's password is
// replaced by "xxxxx".
func Redact(location string) string {
	if !IsURL(location) {
		return location
	}
	u, err := url.Parse(location)
	if err != nil {
		return "postgres://…" // unparsable: show nothing that may be secret
	}
	return u.Redacted()
}

// postgresConns bounds one process's connections: a CLI run needs two or
// three, a gateway or worker a few per run it drives at once.
const postgresConns = 16

// openPostgres opens the store on the PostgreSQL database at dsn and
// brings its schema up to date.
func openPostgres(dsn string) (*DB, error) {
	shown := Redact(dsn)
	if _, err := pgconn.ParseConfig(dsn); err != nil {
		return nil, &UnusableError{Path: shown, Problem: "it is not a valid PostgreSQL URL (" + err.Error() + ")",
			Fix: "set AGENT_DATABASE_URL (or --database) to postgres://USER:PASSWORD@HOST:PORT/DATABASE"}
	}
	conns, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", shown, err)
	}
	conns.SetMaxOpenConns(postgresConns)
	conns.SetMaxIdleConns(postgresConns)
	conns.SetConnMaxIdleTime(5 * time.Minute)
	db := &DB{
		rw: &pool{db: conns, pg: true, write: true}, ro: &pool{db: conns, pg: true},
		Now: time.Now, OwnerDead: ownerDead, file: shown, pg: true, location: dsn,
	}
	ctx, cancel := context.WithTimeout(context.Background(), busyTimeout)
	defer cancel()
	if err := conns.PingContext(ctx); err != nil {
		conns.Close()
		return nil, &UnusableError{Path: shown, Problem: "cannot reach it (" + pgProblem(err) + ")",
			Fix: "start the server, or correct AGENT_DATABASE_URL (or --database)"}
	}
	if err := db.migratePostgres(context.Background()); err != nil {
		conns.Close()
		var u *UnusableError
		if errors.As(err, &u) {
			u.Path = shown
			return nil, u
		}
		return nil, fmt.Errorf("open store %s: %w", shown, err)
	}
	return db, nil
}

// pgProblem is the server's own words for err when it sent any.
func pgProblem(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Message
	}
	return err.Error()
}

// migratePostgres applies the PostgreSQL migrations this database has not
// seen yet. agent_schema records how many have been applied, as SQLite's
// user_version does. Applying them happens under the write lock, even
// creating agent_schema: processes opening a new database at once (a
// gateway and its workers starting together) would otherwise race to
// create it.
func (db *DB) migratePostgres(ctx context.Context) error {
	ms, err := postgresMigrations()
	if err != nil {
		return err
	}
	// Every process but the first finds the schema up to date: it reads
	// so without the write lock, which every writer waits for.
	if v, err := db.postgresVersion(ctx, db.ro); err == nil && v == len(ms) {
		return nil
	}
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS agent_schema (version BIGINT NOT NULL)`); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	current, err := db.postgresVersion(ctx, tx)
	if err != nil {
		return err
	}
	if current > len(ms) {
		return &UnusableError{Problem: fmt.Sprintf("its schema version %d is newer than this agent supports (%d)", current, len(ms)),
			Fix: "upgrade agent, or point AGENT_DATABASE_URL at another database"}
	}
	if current == len(ms) {
		return nil
	}
	for _, m := range ms[current:] {
		if _, err := tx.ExecContext(ctx, m.sql); err != nil {
			return fmt.Errorf("migration %s: %w", m.name, err)
		}
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM agent_schema`); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO agent_schema (version) VALUES (?)`, len(ms)); err != nil {
		return err
	}
	return tx.Commit()
}

// querier is a pool or a transaction.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *row
}

func (db *DB) postgresVersion(ctx context.Context, q querier) (int, error) {
	var v int
	err := q.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM agent_schema`).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}

// ErrNoNotifications is Listen's answer on SQLite, which has none:
// callers poll the store instead.
var ErrNoNotifications = errors.New("the store sends no notifications")

// Listen calls fn with each PostgreSQL notification on channels until ctx
// ends, on a connection of its own, reconnecting when it is lost. After
// each (re)connection it calls fn("", ""), since notifications sent while
// no connection listened are lost: the caller then catches up.
func (db *DB) Listen(ctx context.Context, channels []string, fn func(channel, payload string)) error {
	if !db.pg {
		return ErrNoNotifications
	}
	for {
		// An error is the server gone away: the caller polls meanwhile,
		// and hears fn("", "") once a new connection listens.
		_ = db.listenOnce(ctx, channels, fn)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func (db *DB) listenOnce(ctx context.Context, channels []string, fn func(channel, payload string)) error {
	conn, err := pgx.Connect(ctx, db.location)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, ch := range channels {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return err
		}
	}
	fn("", "")
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		fn(n.Channel, n.Payload)
	}
}
