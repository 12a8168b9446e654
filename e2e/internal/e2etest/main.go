// Package e2etest is what the end-to-end tests in e2e/... share: the
// agent binary they run, built once for all of them by Main; Env, which
// runs it against a scripted fake model; and helpers for harness runs,
// gateways, scheduled jobs, mail, MCP servers, clusters and the JSON the
// CLI prints.
package e2etest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"agent/mcp/mcptest"
)

// bin is the agent binary Main built.
var bin string

// Main runs a package's end-to-end tests. It builds agent from this
// module's source (one build for every package `go test ./...` runs at
// once, see build), puts its directory first in PATH, so tests run it by
// name, and serves the helper programs tests run by name, commands and
// mcptest-server (a real MCP tool server), through testscript.Main: those
// are this test binary under another name.
func Main(m *testing.M, commands map[string]func()) {
	cmds := map[string]func(){"mcptest-server": mcptest.Serve}
	maps.Copy(cmds, commands)
	testscript.Main(withAgent{m}, cmds)
}

// withAgent runs the tests with agent built and in PATH. testscript.Main
// calls Run only in the test binary itself, not in its helper programs.
type withAgent struct{ m *testing.M }

func (w withAgent) Run() int {
	path, err := build(Root())
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2etest: %v\n", err)
		return 1
	}
	bin = path
	os.Setenv("PATH", filepath.Dir(path)+string(filepath.ListSeparator)+os.Getenv("PATH"))
	if race && !strings.Contains(os.Getenv("GORACE"), "atexit_sleep_ms") {
		// A -race process sleeps a second as it exits 0 (the race
		// runtime's atexit_sleep_ms, for goroutines still running to
		// report races), and the tests start hundreds of agent processes
		// and wait for each: most of the suite's time under -race. Races
		// are still reported as they happen, and still exit 66.
		os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	}
	return w.m.Run()
}

// Bin is the path of the agent binary the tests run.
func Bin() string {
	if bin == "" {
		panic("e2etest: no agent binary: the package's TestMain must call e2etest.Main")
	}
	return bin
}

var root = sync.OnceValue(func() string {
	// This file's directory is e2e/internal/e2etest in the module, unless
	// the test binary was built with -trimpath.
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		dir := filepath.Join(filepath.Dir(file), "..", "..", "..")
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
	}
	out, err := exec.Command(goTool(), "env", "GOMOD").Output()
	if gomod := strings.TrimSpace(string(out)); err == nil && filepath.IsAbs(gomod) {
		return filepath.Dir(gomod)
	}
	panic(fmt.Sprintf("e2etest: cannot find the module's root (go env GOMOD: %q, %v)", out, err))
})

// Root is the module's root directory: the repository, whose README.md,
// examples/ and scripts/ some tests read.
func Root() string { return root() }

// goTool is the go command in PATH: go test puts its own GOROOT/bin first.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "go" // for the error naming it
}

// buildsDir holds the builds, one directory per source key, and their lock
// files; a build unused for a day is removed.
var buildsDir = filepath.Join(os.TempDir(), "agent-e2e")

// build returns the path of agent built from the module at dir, building
// it if no build of the same source exists. The test binaries of several
// e2e packages call it at once: a lock file per source key makes one of
// them build while the others wait for it and then use its binary.
func build(dir string) (string, error) {
	key, err := sourceKey(dir)
	if err != nil {
		return "", fmt.Errorf("hash the module's source: %w", err)
	}
	if err := os.MkdirAll(buildsDir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(buildsDir, key+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // Close unlocks too
	out := filepath.Join(buildsDir, key, "agent")
	now := time.Now()
	if _, err := os.Stat(out); err == nil {
		_ = os.Chtimes(filepath.Dir(out), now, now) // in use: not to be pruned
		return out, nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	tmp := fmt.Sprintf("%s.%d.tmp", out, os.Getpid())
	args := []string{"build", "-o", tmp}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.Command(goTool(), append(args, "agent")...)
	cmd.Dir = dir
	if msg, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	if err := os.Rename(tmp, out); err != nil {
		return "", err
	}
	prune(key, now.Add(-24*time.Hour))
	return out, nil
}

// prune removes the builds other than key's last used before cutoff.
func prune(key string, cutoff time.Time) {
	entries, _ := os.ReadDir(buildsDir)
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".lock")
		if !e.IsDir() || name == key {
			continue
		}
		if info, err := e.Info(); err == nil && info.ModTime().Before(cutoff) {
			os.RemoveAll(filepath.Join(buildsDir, name))
			os.Remove(filepath.Join(buildsDir, name+".lock"))
		}
	}
}

// sourceKey hashes what a build of the module at dir reads (every file
// inBuild says it does), the Go version, the race mode and the build's
// environment.
func sourceKey(dir string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s %s/%s race=%v", runtime.Version(), runtime.GOOS, runtime.GOARCH, race)
	for _, k := range []string{"GOFLAGS", "CGO_ENABLED", "CC", "CGO_CFLAGS", "CGO_LDFLAGS"} {
		fmt.Fprintf(h, " %s=%s", k, os.Getenv(k))
	}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && skipDir(rel) {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !inBuild(rel) {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) { // removed while we walk
				return nil
			}
			return err
		}
		fmt.Fprintf(h, "\n%s %d\n", rel, len(data))
		h.Write(data)
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil))[:20], nil
}

// skipDir reports whether a directory (slash-separated, from the module's
// root) holds nothing the binary is built from.
func skipDir(rel string) bool {
	name := rel[strings.LastIndex(rel, "/")+1:]
	return strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" ||
		rel == "e2e" || rel == "bin" || rel == "artifacts" || rel == "docs" || rel == "scripts"
}

// inBuild reports whether a file (slash-separated, from the module's root)
// is read by a build of agent: Go, C and assembly sources but tests, the
// files go:embed takes (SQL migrations, prompt templates, the web view,
// the one-decision link's page) and go.mod and go.sum. TestSourceKeyCoversTheBuild holds it to what
// go list says.
func inBuild(rel string) bool {
	switch {
	case rel == "go.mod" || rel == "go.sum":
		return true
	case strings.HasSuffix(rel, "_test.go"):
		return false
	case strings.HasPrefix(rel, "gateway/web/"):
		return true
	}
	switch filepath.Ext(rel) {
	case ".go", ".c", ".h", ".s", ".S", ".sql", ".tmpl", ".html":
		return true
	}
	return false
}
