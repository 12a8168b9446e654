package store

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// withUmask sets the process umask for one test. Not parallel: the umask
// is the process's, and parallel tests wait until sequential ones end.
func withUmask(t *testing.T, mask int) {
	old := syscall.Umask(mask)
	t.Cleanup(func() { syscall.Umask(old) })
}

// checkModes fails the test unless each of files exists with mode 0600.
func checkModes(t *testing.T, files ...string) {
	t.Helper()
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			t.Errorf("%s: %v", filepath.Base(f), err)
			continue
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", filepath.Base(f), fi.Mode().Perm())
		}
	}
}

// agent.db and its -wal and -shm files hold every conversation: only the
// user may read them, even under a 022 umask in a world-readable home.
func TestOpenCreatesPrivateFiles(t *testing.T) {
	withUmask(t, 0o022)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "agent.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	createRun(t, db, "run-1") // a write, so the WAL and shared memory exist
	checkModes(t, path, path+"-wal", path+"-shm")
}

// A store created before with 0644 files is narrowed on the next Open.
func TestOpenNarrowsExistingFiles(t *testing.T) {
	withUmask(t, 0o022)
	path := filepath.Join(t.TempDir(), "agent.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	createRun(t, db, "run-1")
	// Another handle keeps the WAL and shared memory files while the
	// modes are widened, as an older agent would have left them.
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Chmod(f, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	again, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	defer db.Close()
	if _, err := again.GetRun(t.Context(), "run-1"); err != nil {
		t.Fatal(err)
	}
	checkModes(t, path, path+"-wal", path+"-shm")
}
