package cluster

import (
	"strings"
	"testing"

	"agent/e2e/internal/e2etest"
	"agent/store/pgtest"
)

// --database is taken after every command that opens the store, and
// doctor checks the store actually in use: the PostgreSQL database, not
// an SQLite file that does not exist.
func TestDatabaseFlagOnEveryCommand(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t)
	dsn := pgtest.Database(t, pgtest.Start(t), "")
	doctor := e.Run("doctor", "--database", dsn)
	if doctor.Code != 0 || !strings.Contains(doctor.Stdout, "PostgreSQL database") || strings.Contains(doctor.Stdout, "agent.db") {
		t.Errorf("doctor --database: exit %d\n%s%s", doctor.Code, doctor.Stdout, doctor.Stderr)
	}
	if list := e.Run("runs", "list", "--database", dsn); list.Code != 0 {
		t.Errorf("runs list --database: exit %d %s", list.Code, list.Stderr)
	}
	gone := e.Run("doctor", "--database", "postgres://nobody@127.0.0.1:1/none?connect_timeout=5")
	if gone.Code != 5 || !strings.Contains(gone.Stdout+gone.Stderr, "cannot reach") {
		t.Errorf("doctor on an unreachable database: exit %d %s%s; want 5 saying so", gone.Code, gone.Stdout, gone.Stderr)
	}
}
