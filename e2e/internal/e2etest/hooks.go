package e2etest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"agent/event"
)

// WriteHooks writes a Claude Code settings.json and the scripts it names
// into a directory beside the workspace (the operator's, not the
// model's), and returns the settings file's path, for --settings. In
// settings, $DIR is that directory.
func (e *Env) WriteHooks(t *testing.T, settings string, scripts map[string]string) string {
	t.Helper()
	NeedJQ(t)
	dir := filepath.Join(filepath.Dir(e.Workspace), "hooks")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "settings.json")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(settings, "$DIR", dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// NeedJQ skips a test whose hook scripts read their input with jq, as
// Claude Code's documented ones do, when jq is missing (scripts/deps.sh
// installs it).
func NeedJQ(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("jq"); err != nil {
		t.Skip("jq is missing: the hook scripts read their input with it; scripts/deps.sh installs it")
	}
}

// HookRecords are the data of the hook.completed events in evs.
func HookRecords(t *testing.T, evs []event.Event) []event.HookCompletedData {
	t.Helper()
	var out []event.HookCompletedData
	for _, e := range OfType(evs, event.HookCompleted) {
		var d event.HookCompletedData
		if err := e.Decode(&d); err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}
