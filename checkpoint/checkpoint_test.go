package checkpoint_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"agent/checkpoint"
	"agent/event"
)

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func write(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func countFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestBlobsRoundTripAndDedup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	blobs := checkpoint.Blobs{Dir: filepath.Join(dir, "blobs")}
	a := filepath.Join(dir, "a.txt")
	b := filepath.Join(dir, "b.txt")
	write(t, a, "same content\n", 0o644)
	write(t, b, "same content\n", 0o600)

	sa, existed, err := blobs.Put(a)
	if err != nil || !existed || sa != sum("same content\n") {
		t.Fatalf("Put(a) = %q, %v, %v", sa, existed, err)
	}
	sb, _, err := blobs.Put(b)
	if err != nil || sb != sa {
		t.Fatalf("Put(b) = %q, %v; want the same hash", sb, err)
	}
	if n := countFiles(t, blobs.Dir); n != 1 {
		t.Errorf("blob store holds %d files, want 1 (dedup, no stray temporaries)", n)
	}
	want := filepath.Join(blobs.Dir, "sha256", sa[:2], sa)
	if _, err := os.Stat(want); err != nil {
		t.Errorf("blob not at %s: %v", want, err)
	}
	got, err := blobs.Get(sa)
	if err != nil || string(got) != "same content\n" {
		t.Fatalf("Get = %q, %v", got, err)
	}

	// A missing file is recorded as such, not as an error.
	s, existed, err := blobs.Put(filepath.Join(dir, "nope.txt"))
	if err != nil || existed || s != "" {
		t.Errorf("Put(missing) = %q, %v, %v", s, existed, err)
	}

	// Empty content is content.
	empty, err := blobs.PutBytes(nil)
	if err != nil || empty != sum("") {
		t.Errorf("PutBytes(nil) = %q, %v", empty, err)
	}

	// Corruption and bad names are errors, never wrong content.
	if err := os.WriteFile(want, []byte("tampered"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := blobs.Get(sa); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("Get of a tampered blob: %v", err)
	}
	if _, err := blobs.Get("../../etc/passwd"); err == nil {
		t.Error("Get accepted a path as a hash")
	}
	if _, err := blobs.Get(sum("never stored")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Get of an unknown blob: %v", err)
	}
}

func TestSnapshot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	blobs := checkpoint.Blobs{Dir: filepath.Join(dir, "blobs")}
	ws := filepath.Join(dir, "ws")
	write(t, filepath.Join(ws, "run.sh"), "#!/bin/sh\n", 0o755)

	d, ok, err := blobs.Snapshot(context.Background(), ws, "run.sh")
	if err != nil || !ok {
		t.Fatalf("Snapshot = %v, %v", ok, err)
	}
	if !d.Existed || d.Blob != sum("#!/bin/sh\n") || d.Mode != 0o755 || d.Bytes != 10 || d.Path != "run.sh" {
		t.Errorf("snapshot of an existing file = %+v", d)
	}

	d, ok, err = blobs.Snapshot(context.Background(), ws, "new/x.txt")
	if err != nil || !ok || d.Existed || d.Blob != "" {
		t.Errorf("snapshot of a missing file = %+v, %v, %v", d, ok, err)
	}

	// A directory is nothing to save: the tools refuse to write one.
	if _, ok, err := blobs.Snapshot(context.Background(), ws, "."); ok || err != nil {
		t.Errorf("snapshot of a directory = %v, %v; want nothing to save", ok, err)
	}
}

// TestRewind covers every outcome. Each case starts from a workspace
// where the run has finished: before[path] is the file before the run
// (absent: it did not exist), wrote[path] what the run last wrote, and
// now[path] the file as rewind finds it (absent: deleted).
func TestRewind(t *testing.T) {
	t.Parallel()
	type file struct {
		before, wrote, now *string
	}
	s := func(v string) *string { return &v }
	tests := []struct {
		name  string
		files []file // checkpoint i+1 is files[i], paths f1.txt, f2.txt…
		to    int
		force bool
		lose  []int // checkpoint numbers whose blob is lost

		want   []string // "outcome path" per file, in checkpoint order
		reason []string // substrings of the reasons, "" for none
		after  []*string
	}{
		{
			name:   "restored and removed",
			files:  []file{{s("old"), s("new"), s("new")}, {nil, s("created"), s("created")}},
			want:   []string{"restored f1.txt", "removed f2.txt"},
			reason: []string{"", ""},
			after:  []*string{s("old"), nil},
		},
		{
			name:   "skipped when changed after the run",
			files:  []file{{s("old"), s("new"), s("user edit")}, {nil, s("created"), s("user edit")}},
			want:   []string{"skipped f1.txt", "skipped f2.txt"},
			reason: []string{"changed after the run (use --force)", "changed after the run"},
			after:  []*string{s("user edit"), s("user edit")},
		},
		{
			name:   "skipped when missing now",
			files:  []file{{s("old"), s("new"), nil}},
			want:   []string{"skipped f1.txt"},
			reason: []string{"deleted after the run (use --force)"},
			after:  []*string{nil},
		},
		{
			name:   "force restores and removes changed files",
			files:  []file{{s("old"), s("new"), s("user edit")}, {nil, s("created"), s("user edit")}, {s("gone"), s("new"), nil}},
			force:  true,
			want:   []string{"restored f1.txt", "removed f2.txt", "restored f3.txt"},
			reason: []string{"", "", ""},
			after:  []*string{s("old"), nil, s("gone")},
		},
		{
			name:   "to N rewinds only files first changed at N or later",
			files:  []file{{s("old1"), s("new1"), s("new1")}, {s("old2"), s("new2"), s("new2")}, {nil, s("new3"), s("new3")}},
			to:     2,
			want:   []string{"restored f2.txt", "removed f3.txt"},
			reason: []string{"", ""},
			after:  []*string{s("new1"), s("old2"), nil},
		},
		{
			name:   "failed when the saved content is gone",
			files:  []file{{s("old"), s("new"), s("new")}, {nil, s("created"), s("created")}},
			lose:   []int{1},
			want:   []string{"failed f1.txt", "removed f2.txt"},
			reason: []string{"saved content missing", ""},
			after:  []*string{s("new"), nil},
		},
		{
			name:   "already as before the run",
			files:  []file{{s("same"), s("same"), s("same")}, {nil, s("created"), nil}},
			want:   []string{"restored f1.txt", "removed f2.txt"},
			reason: []string{"already as before the run", "already as before the run"},
			after:  []*string{s("same"), nil},
		},
		{
			name:   "a failed write that something else changed is skipped",
			files:  []file{{s("old"), nil, s("changed by bash")}},
			want:   []string{"skipped f1.txt"},
			reason: []string{"not by a file tool of this run"},
			after:  []*string{s("changed by bash")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			ws := filepath.Join(dir, "ws")
			blobs := checkpoint.Blobs{Dir: filepath.Join(dir, "blobs")}
			req := checkpoint.Request{RunID: "r1", Workspace: ws, LastWrites: map[string]string{}, To: tt.to, Force: tt.force}
			for i, f := range tt.files {
				rel := name(i)
				abs := filepath.Join(ws, rel)
				p := checkpoint.Point{Number: i + 1, Path: rel}
				if f.before != nil {
					write(t, abs, *f.before, 0o640)
					d, ok, err := blobs.Snapshot(context.Background(), ws, rel)
					if err != nil || !ok {
						t.Fatal(ok, err)
					}
					p.Existed, p.Blob, p.Mode = true, d.Blob, os.FileMode(d.Mode)
				}
				if f.wrote != nil {
					req.LastWrites[rel] = sum(*f.wrote)
				}
				os.Remove(abs)
				if f.now != nil {
					write(t, abs, *f.now, 0o644)
				}
				req.Points = append(req.Points, p)
			}
			for _, n := range tt.lose {
				b := req.Points[n-1].Blob
				if err := os.Remove(filepath.Join(blobs.Dir, "sha256", b[:2], b)); err != nil {
					t.Fatal(err)
				}
			}

			rep, err := checkpoint.Rewind(blobs, req)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for i, f := range rep.Files {
				got = append(got, f.Outcome+" "+f.Path)
				if (tt.reason[i] == "") != (f.Reason == "") || !strings.Contains(f.Reason, tt.reason[i]) {
					t.Errorf("%s: reason %q, want %q", f.Path, f.Reason, tt.reason[i])
				}
			}
			if strings.Join(got, ", ") != strings.Join(tt.want, ", ") {
				t.Errorf("outcomes = %v, want %v", got, tt.want)
			}
			for i, want := range tt.after {
				path := filepath.Join(ws, name(i))
				b, err := os.ReadFile(path)
				switch {
				case want == nil && err == nil:
					t.Errorf("%s exists with %q, want it gone", name(i), b)
				case want != nil && (err != nil || string(b) != *want):
					t.Errorf("%s = %q, %v; want %q", name(i), b, err, *want)
				}
			}
			for _, f := range rep.Files {
				if f.Outcome != event.StatusRestored || f.Reason != "" {
					continue
				}
				// Files start as 0640 and are rewritten as 0644 after the run.
				fi, err := os.Stat(filepath.Join(ws, f.Path))
				if err != nil {
					t.Fatal(err)
				}
				if fi.Mode().Perm() != 0o640 {
					t.Errorf("%s restored with mode %v, want the saved 0640", f.Path, fi.Mode().Perm())
				}
			}
			if rep.RunID != "r1" || rep.To != max(tt.to, 1) {
				t.Errorf("report header = %q to %d", rep.RunID, rep.To)
			}
		})
	}
}

// name is the path of the i-th file of a TestRewind case.
func name(i int) string { return fmt.Sprintf("f%d.txt", i+1) }

func TestRewindRange(t *testing.T) {
	t.Parallel()
	points := []checkpoint.Point{{Number: 1, Path: "a"}, {Number: 2, Path: "b"}}
	for _, to := range []int{-1, 3} {
		_, err := checkpoint.Rewind(checkpoint.Blobs{Dir: t.TempDir()}, checkpoint.Request{Workspace: t.TempDir(), Points: points, To: to})
		var rng *checkpoint.RangeError
		if !errors.As(err, &rng) || rng.Max != 2 {
			t.Errorf("to %d: %v, want a RangeError naming 2 checkpoints", to, err)
		}
	}
	// No checkpoints and no --to: nothing to do, not an error.
	rep, err := checkpoint.Rewind(checkpoint.Blobs{Dir: t.TempDir()}, checkpoint.Request{RunID: "r", Workspace: t.TempDir()})
	if err != nil || len(rep.Files) != 0 || rep.Files == nil {
		t.Errorf("empty rewind = %+v, %v; want an empty (not null) file list", rep, err)
	}
}

func TestPlanUsesFirstCheckpointOfEachFile(t *testing.T) {
	t.Parallel()
	// A harness phase child starts with no memory of earlier phases, so a
	// file may be checkpointed twice; only its first checkpoint is its
	// state before the run.
	points := []checkpoint.Point{
		{Number: 1, Path: "a", Blob: "first"},
		{Number: 2, Path: "b"},
		{Number: 3, Path: "a", Blob: "second"},
	}
	plan, err := checkpoint.Plan(points, 1)
	if err != nil || len(plan) != 2 || plan[0].Blob != "first" || plan[1].Path != "b" {
		t.Errorf("Plan(all) = %+v, %v", plan, err)
	}
	plan, err = checkpoint.Plan(points, 3)
	if err != nil || len(plan) != 0 {
		t.Errorf("Plan(3) = %+v, %v; a was first changed at 1", plan, err)
	}
}

func TestRewindRefusesPathsOutsideTheWorkspace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	outside := filepath.Join(dir, "outside")
	write(t, filepath.Join(outside, "x.txt"), "keep", 0o644)
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	req := checkpoint.Request{Workspace: ws, Force: true, Points: []checkpoint.Point{
		{Number: 1, Path: "../outside/x.txt"},
		{Number: 2, Path: "link/x.txt"},
	}}
	rep, err := checkpoint.Rewind(checkpoint.Blobs{Dir: filepath.Join(dir, "blobs")}, req)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Files {
		if f.Outcome != event.StatusFailed || !strings.Contains(f.Reason, "outside the workspace") {
			t.Errorf("%s: %s %q, want failed outside the workspace", f.Path, f.Outcome, f.Reason)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "x.txt")); string(b) != "keep" {
		t.Error("rewind removed a file outside the workspace")
	}
}

// A snapshot never saves a file from outside the workspace, even through
// a symlink put in place of the path, and never blocks on a FIFO.
func TestSnapshotStaysInside(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	if err := os.MkdirAll(filepath.Join(ws, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "secret.txt"), "the outside secret", 0o600)
	if err := os.Symlink(filepath.Join(dir, "secret.txt"), filepath.Join(ws, "sub", "notes.txt")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(ws, "pipe"), 0o600); err != nil {
		t.Fatal(err)
	}
	blobs := checkpoint.Blobs{Dir: filepath.Join(dir, "blobs")}
	if d, _, err := blobs.Snapshot(context.Background(), ws, "sub/notes.txt"); err == nil || d.Blob != "" {
		t.Errorf("snapshot through a symlink out: %+v %v, want refused", d, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, ok, err := blobs.Snapshot(context.Background(), ws, "pipe"); ok || err != nil {
			t.Errorf("snapshot of a FIFO: ok %v %v, want nothing to save", ok, err)
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Minute): // a safety net: it takes microseconds, a loaded machine seconds
		t.Fatal("a snapshot of a FIFO blocked")
	}
	filepath.WalkDir(blobs.Dir, func(path string, e fs.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			if data, _ := os.ReadFile(path); string(data) == "the outside secret" {
				t.Errorf("the outside file was saved as blob %s", path)
			}
		}
		return nil
	})
}
