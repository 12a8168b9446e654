package store

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"agent/store/pgtest"
)

// The store's tests run on both dialects. TestStoreOnPostgres starts a
// PostgreSQL server and runs this test binary again with postgresEnv set
// to it; openTest then gives each test a fresh database on that server
// instead of a SQLite file. Tests of what only SQLite has (its file, its
// pragmas) call sqliteOnly.
const postgresEnv = "STORE_TEST_POSTGRES"

func TestStoreOnPostgres(t *testing.T) {
	if os.Getenv(postgresEnv) != "" {
		t.Skip("this is the run on PostgreSQL")
	}
	server := pgtest.Start(t)
	args := []string{"-test.v", "-test.count=1", "-test.skip", "^(TestStoreOnPostgres|TestPostgres.*)$"}
	if testing.Short() {
		args = append(args, "-test.short")
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), postgresEnv+"="+server)
	out, err := cmd.CombinedOutput()
	passed, skipped := 0, 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "--- PASS: ") && !strings.Contains(line, "/"):
			passed++
		case strings.HasPrefix(line, "--- SKIP: ") && !strings.Contains(line, "/"):
			skipped++
		}
	}
	if err != nil {
		t.Fatalf("the store's tests failed on PostgreSQL (%v):\n%s", err, failures(out))
	}
	if passed < 70 { // of 84; a few are SQLite's alone
		t.Fatalf("only %d of the store's tests passed on PostgreSQL:\n%s", passed, out)
	}
	t.Logf("%d tests passed on PostgreSQL; %d skipped there (SQLite only)", passed, skipped)
}

// failures keeps the lines of a verbose test run that say what failed.
func failures(out []byte) string {
	var b strings.Builder
	for _, line := range strings.Split(string(out), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "=== ") || strings.HasPrefix(trimmed, "--- PASS") || strings.HasPrefix(trimmed, "--- SKIP") {
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// sqliteOnly skips a test of what only the SQLite store has.
func sqliteOnly(t testing.TB) {
	t.Helper()
	if os.Getenv(postgresEnv) != "" {
		t.Skip("SQLite only")
	}
}

// openTest opens a fresh, empty store: a SQLite file in a temporary
// directory, or a database on the PostgreSQL server of postgresEnv.
func openTest(t testing.TB) *DB {
	t.Helper()
	location := filepath.Join(t.TempDir(), "agent.db")
	if server := os.Getenv(postgresEnv); server != "" {
		location = pgtest.Database(t, server, postgresTemplate(t, server))
	}
	db, err := Open(location)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

var template struct {
	once sync.Once
	err  error
}

// templateName is the database migrated once, for openTest to copy.
const templateName = "agent_template"

// postgresTemplate returns the name of a database migrated once, for
// openTest to copy. It lives as long as the server.
func postgresTemplate(t testing.TB, server string) string {
	template.once.Do(func() {
		if template.err = pgtest.Create(server, templateName, ""); template.err != nil {
			return
		}
		var db *DB
		if db, template.err = Open(pgtest.WithDatabase(server, templateName)); template.err == nil {
			db.Close()
		}
	})
	if template.err != nil {
		t.Fatalf("template database: %v", template.err)
	}
	return templateName
}
