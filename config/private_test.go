package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A config.toml others may write names commands that would run as the
// user: refused (exit 5), naming the file and the fix, as ssh does.
func TestConfigOthersMayWriteIsRefused(t *testing.T) {
	home := t.TempDir()
	path := filepath.Join(home, "config.toml")
	if err := os.WriteFile(path, []byte("[mcp_servers.evil]\ncommand = \"/bin/sh\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadFile(home); err != nil {
		t.Fatalf("a 0600 file: %v", err)
	}
	for _, mode := range []os.FileMode{0o666, 0o620, 0o602} {
		os.Chmod(path, mode)
		_, _, err := ReadFile(home)
		var he *HomeError
		if !errors.As(err, &he) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "chmod go-w "+path) {
			t.Errorf("mode %04o: err = %v", mode, err)
		}
	}
	os.Chmod(path, 0o644)
	if _, _, err := ReadFile(home); err != nil {
		t.Errorf("a 0644 file: %v", err)
	}
	if os.Geteuid() != 0 {
		return
	}
	if err := os.Chown(path, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	_, _, err := ReadFile(home)
	var he *HomeError
	if !errors.As(err, &he) || !strings.Contains(err.Error(), "owned by uid 4242") || !strings.Contains(err.Error(), "chown it to yourself") {
		t.Errorf("another owner: err = %v", err)
	}
}

// Private holds AGENT_HOME, and the PostgreSQL client's files only when
// the store is on PostgreSQL.
func TestPrivate(t *testing.T) {
	t.Setenv(DatabaseEnv, "")
	t.Setenv("HOME", "/home/u")
	if got := Private("/home/u/.local/share/agent"); !slices.Equal(got, []string{"/home/u/.local/share/agent"}) {
		t.Errorf("SQLite: %v", got)
	}
	t.Setenv(DatabaseEnv, "postgres://agent:pw@db/agent?sslkey=/keys/client.key")
	t.Setenv("PGPASSFILE", "/secrets/pgpass")
	t.Setenv("PGSERVICEFILE", "")
	got := Private("/h")
	for _, want := range []string{"/h", "/secrets/pgpass", "/home/u/.pg_service.conf", "/home/u/.postgresql", "/keys/client.key"} {
		if !slices.Contains(got, want) {
			t.Errorf("PostgreSQL: %v lacks %s", got, want)
		}
	}
}
