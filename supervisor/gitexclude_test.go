package supervisor

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A harness's .agent/ stays out of git status, once however often it
// runs; a workspace that is no repository gets no .git.
func TestExcludeRunFiles(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	ws := t.TempDir()
	if out, err := exec.Command("git", "-C", ws, "init", "-q").CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	if err := os.MkdirAll(filepath.Join(ws, ".agent", "runs", "r1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, ".agent", "runs", "r1", "mission.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := excludeRunFiles(ws); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command("git", "-C", ws, "status", "--porcelain").CombinedOutput()
	if err != nil || strings.Contains(string(out), ".agent") {
		t.Errorf("git status shows %q (%v)", out, err)
	}
	data, _ := os.ReadFile(filepath.Join(ws, ".git", "info", "exclude"))
	if n := strings.Count(string(data), "/.agent/"); n != 1 {
		t.Errorf("exclude has /.agent/ %d times, want once:\n%s", n, data)
	}
	plain := t.TempDir()
	if err := excludeRunFiles(plain); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(plain, ".git")); err == nil {
		t.Error("a workspace that is no repository got a .git")
	}
}
