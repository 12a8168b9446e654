package tools

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestSymlinkSwapRace has a hostile process swap a subdirectory of the
// workspace for a symlink to a directory outside it, and back, as fast as
// it can, while every file tool reads, writes, edits, lists and greps under
// that subdirectory. Whatever the interleaving, nothing outside may be read
// (the sentinel never appears in a result) or written (the outside
// directories stay exactly as they were).
//
// The paths run deep below the swapped directory, and the outside tree
// mirrors them, so that a tool that checks a path component by component
// and then uses it by name has a wide window between checking "sub" and
// opening the file. The old implementation (Resolve, then plain os calls
// on the resolved path) lost this race in 60 runs out of 60.
func TestSymlinkSwapRace(t *testing.T) {
	t.Parallel()
	const sentinel = "SENTINEL"
	deep := strings.Repeat("d/", 16) // below sub
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(base, "ws")
	outRead := filepath.Join(base, "out")    // holds the sentinel
	outEmpty := filepath.Join(base, "empty") // must stay empty
	writeTree(t, root, map[string]string{"sub/" + deep + "f.txt": "word\n"})
	writeTree(t, outRead, map[string]string{deep + "f.txt": "word " + sentinel + "\n", deep + sentinel + ".txt": "x\n"})
	if err := os.Mkdir(outEmpty, 0o755); err != nil {
		t.Fatal(err)
	}
	ws, err := NewWorkspace(root)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSet(ws, Options{Deny: []string{"bash"}})
	if err != nil {
		t.Fatal(err)
	}
	beforeRead := snapshotDir(t, outRead)
	beforeEmpty := snapshotDir(t, outEmpty)

	// The adversary. Targets alternate between an absolute and a relative
	// link, to the sentinel tree and to the empty directory. It keeps the
	// link in place about as long as the directory (it moves the displaced
	// directory once more meanwhile), so that a call's use is as likely to
	// meet the link as its check is to meet the directory.
	sub, away, aside := filepath.Join(root, "sub"), filepath.Join(root, "sub.away"), filepath.Join(root, "sub.aside")
	targets := []string{outRead, "../empty", "../out", outEmpty}
	stop := make(chan struct{})
	var swaps atomic.Int64
	var swapper sync.WaitGroup
	swapper.Add(1)
	go func() {
		defer swapper.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if os.Rename(sub, away) != nil {
				continue
			}
			// A write_file may have recreated sub meanwhile: clear it away
			// (it is inside the workspace) until the link is in place.
			for os.Symlink(targets[i%len(targets)], sub) != nil {
				os.RemoveAll(sub)
			}
			swaps.Add(1)
			os.Rename(away, aside)
			os.Rename(aside, away)
			for {
				os.RemoveAll(sub) // the link only, never what it points to
				if os.Rename(away, sub) == nil {
					break
				}
			}
		}
	}()

	file := "sub/" + deep + "f.txt"
	calls := []struct {
		tool string
		args func(i int) map[string]any
	}{
		{"read_file", func(int) map[string]any { return map[string]any{"path": file} }},
		{"write_file", func(int) map[string]any {
			return map[string]any{"path": "sub/" + deep + "new.txt", "content": "written\n"}
		}},
		{"edit_file", func(i int) map[string]any {
			if i%2 == 0 {
				return map[string]any{"path": file, "old_string": "word", "new_string": "WORD"}
			}
			return map[string]any{"path": file, "old_string": "WORD", "new_string": "word"}
		}},
		{"list_files", func(int) map[string]any { return map[string]any{"path": "sub/" + deep} }},
		{"grep", func(int) map[string]any { return map[string]any{"pattern": "(?i)word", "path": "sub/" + deep} }},
		{"grep", func(int) map[string]any { return map[string]any{"pattern": "(?i)word", "path": file} }},
		// Walks that enter the swapped directory from above it.
		{"list_files", func(int) map[string]any { return map[string]any{"path": "sub"} }},
		{"grep", func(int) map[string]any { return map[string]any{"pattern": "(?i)word", "path": "sub"} }},
	}
	// One caller (this goroutine), so that on a small machine the
	// adversary is not starved of CPU. A call loses the race when a swap lands in its window, so the
	// calls go on until the adversary has swapped enough times, however
	// busy the machine: a count, not a duration (maxRounds is a safety net).
	const minRounds, minSwaps, maxRounds = 50, 3000, 300
	var leaks []string
	for i := 0; i < maxRounds && (i < minRounds || swaps.Load() < minSwaps); i++ {
		for _, c := range calls {
			res := call(t, s, c.tool, c.args(i))
			if strings.Contains(res.Output, sentinel) {
				leaks = append(leaks, fmt.Sprintf("%s %v: %q", c.tool, c.args(i), res.Output))
			}
		}
	}
	close(stop)
	swapper.Wait()

	for i, l := range leaks {
		if i == 5 {
			t.Errorf("… and %d more", len(leaks)-i)
			break
		}
		t.Errorf("read outside the workspace: %s", l)
	}
	if after := snapshotDir(t, outRead); strings.Join(after, "\n") != strings.Join(beforeRead, "\n") {
		t.Errorf("written outside the workspace:\nbefore %q\nafter  %q", beforeRead, after)
	}
	if after := snapshotDir(t, outEmpty); strings.Join(after, "\n") != strings.Join(beforeEmpty, "\n") {
		t.Errorf("written outside the workspace:\nbefore %q\nafter  %q", beforeEmpty, after)
	}
}

// TestSiblingPrefixIsOutside checks that a workspace at /x/ws does not
// contain /x/ws-evil: containment compares path components, not strings.
func TestSiblingPrefixIsOutside(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		tool string
		args map[string]any
	}{
		{"read absolute", "read_file", map[string]any{"path": "EVIL/secret.txt"}},
		{"read dotdot", "read_file", map[string]any{"path": "../ws-evil/secret.txt"}},
		{"read symlink", "read_file", map[string]any{"path": "to_evil/secret.txt"}},
		{"read file symlink", "read_file", map[string]any{"path": "evil_file"}},
		{"write absolute", "write_file", map[string]any{"path": "EVIL/new.txt", "content": "x"}},
		{"write dotdot", "write_file", map[string]any{"path": "../ws-evil/new.txt", "content": "x"}},
		{"write symlink", "write_file", map[string]any{"path": "to_evil/new.txt", "content": "x"}},
		{"write file symlink", "write_file", map[string]any{"path": "evil_file", "content": "x"}},
		{"edit absolute", "edit_file", map[string]any{"path": "EVIL/secret.txt", "old_string": "TOPSECRET", "new_string": "x"}},
		{"edit symlink", "edit_file", map[string]any{"path": "to_evil/secret.txt", "old_string": "TOPSECRET", "new_string": "x"}},
		{"list absolute", "list_files", map[string]any{"path": "EVIL"}},
		{"list symlink", "list_files", map[string]any{"path": "to_evil"}},
		{"grep absolute", "grep", map[string]any{"pattern": "TOPSECRET", "path": "EVIL"}},
		{"grep symlink", "grep", map[string]any{"pattern": "TOPSECRET", "path": "to_evil"}},
		{"grep file symlink", "grep", map[string]any{"pattern": "TOPSECRET", "path": "evil_file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base, err := filepath.EvalSymlinks(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			root, evil := filepath.Join(base, "ws"), filepath.Join(base, "ws-evil")
			writeTree(t, root, map[string]string{"a.txt": "a\n"})
			writeTree(t, evil, map[string]string{"secret.txt": "TOPSECRET\n"})
			for name, target := range map[string]string{"to_evil": evil, "evil_file": filepath.Join(evil, "secret.txt")} {
				if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
					t.Fatal(err)
				}
			}
			ws, err := NewWorkspace(root)
			if err != nil {
				t.Fatal(err)
			}
			s, err := NewSet(ws, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if p, ok := tt.args["path"].(string); ok {
				tt.args["path"] = strings.Replace(p, "EVIL", evil, 1)
			}
			before := snapshotDir(t, evil)
			res := call(t, s, tt.tool, tt.args)
			if !res.IsError || !strings.Contains(res.Output, "is outside the workspace") {
				t.Fatalf("result = %+v, want an outside-the-workspace error", res)
			}
			if strings.Contains(res.Output, "TOPSECRET") {
				t.Fatalf("output leaks the sibling's file: %q", res.Output)
			}
			if after := snapshotDir(t, evil); strings.Join(after, "\n") != strings.Join(before, "\n") {
				t.Fatalf("sibling changed:\nbefore %q\nafter  %q", before, after)
			}
			// WritesTo (checkpoints) must not name it either.
			if tt.tool == "write_file" || tt.tool == "edit_file" {
				if got := s.WritesTo(tt.tool, mustJSON(t, tt.args)); got != nil {
					t.Fatalf("WritesTo = %+v, want none", got)
				}
			}
		})
	}
}

func TestWithin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		dir, p string
		want   bool
	}{
		{"/x/ws", "/x/ws", true},
		{"/x/ws", "/x/ws/a", true},
		{"/x/ws", "/x/ws/a/b", true},
		{"/x/ws", "/x/ws-evil", false},
		{"/x/ws", "/x/ws-evil/a", false},
		{"/x/ws", "/x/wsa", false},
		{"/x/ws", "/x", false},
		{"/x/ws", "/", false},
		{"/x/ws", "/y/ws", false},
		{"/", "/anything", true},
		{"/", "/", true},
	}
	for _, tt := range tests {
		if got := within(tt.dir, tt.p); got != tt.want {
			t.Errorf("within(%q, %q) = %v, want %v", tt.dir, tt.p, got, tt.want)
		}
	}
}

// TestNonRegularFiles checks that no tool blocks on, or reads, a FIFO or a
// device in the workspace: each call must return at once with a clear
// refusal (or, for the walks, skip it).
func TestNonRegularFiles(t *testing.T) {
	t.Parallel()
	type special struct {
		name, kind string
		make       func(p string) error
	}
	specials := []special{
		{"fifo", "fifo", func(p string) error { return syscall.Mkfifo(p, 0o644) }},
		// The same device as /dev/zero: reading it would never end.
		{"zero", "character device", func(p string) error {
			return syscall.Mknod(p, syscall.S_IFCHR|0o644, int(1<<8|5))
		}},
	}
	tests := []struct {
		name, tool string
		args       map[string]any
		want       string // substring of the result; "" for a walk that just skips it
		isErr      bool
	}{
		{"read", "read_file", map[string]any{"path": "SPECIAL"}, `"SPECIAL" is not a regular file: KIND`, true},
		{"read through link", "read_file", map[string]any{"path": "link"}, `"SPECIAL" is not a regular file: KIND`, true},
		{"edit", "edit_file", map[string]any{"path": "SPECIAL", "old_string": "a", "new_string": "b"}, `"SPECIAL" is not a regular file: KIND`, true},
		{"write", "write_file", map[string]any{"path": "SPECIAL", "content": "x"}, `"SPECIAL" is not a regular file: KIND`, true},
		{"grep the file", "grep", map[string]any{"pattern": "x", "path": "SPECIAL"}, "no matches", false},
		{"grep the link", "grep", map[string]any{"pattern": "x", "path": "link"}, "no matches", false},
		{"grep the tree", "grep", map[string]any{"pattern": "needle"}, "a.txt:1: needle", false},
		{"list the tree", "list_files", map[string]any{}, "SPECIAL", false},
	}
	for _, sp := range specials {
		for _, tt := range tests {
			t.Run(sp.name+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				s, root := newTestSet(t, Options{}, map[string]string{"a.txt": "needle\n"})
				p := filepath.Join(root, sp.name)
				if err := sp.make(p); err != nil {
					if errors.Is(err, syscall.EPERM) {
						t.Skipf("cannot make a %s here: %v", sp.kind, err)
					}
					t.Fatal(err)
				}
				if err := os.Symlink(sp.name, filepath.Join(root, "link")); err != nil {
					t.Fatal(err)
				}
				// On a broken tool the call blocks in open(2) forever: opening
				// the FIFO for writing at the end releases it.
				t.Cleanup(func() {
					if f, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
						f.Close()
					}
				})
				args := map[string]any{}
				for k, v := range tt.args {
					if k == "path" {
						v = strings.Replace(v.(string), "SPECIAL", sp.name, 1)
					}
					args[k] = v
				}
				done := make(chan Result, 1)
				go func() { done <- call(t, s, tt.tool, args) }()
				var res Result
				select {
				case res = <-done:
				case <-time.After(patience): // a safety net; a correct call takes microseconds
					t.Fatalf("%s on a %s blocked", tt.tool, sp.kind)
				}
				want := strings.NewReplacer("SPECIAL", sp.name, "KIND", sp.kind).Replace(tt.want)
				if res.IsError != tt.isErr || !strings.Contains(res.Output, want) {
					t.Fatalf("result = %+v, want IsError=%v and %q", res, tt.isErr, want)
				}
				if fi, err := os.Lstat(p); err != nil || fi.Mode().IsRegular() {
					t.Fatalf("the %s was replaced: %v %v", sp.kind, fi, err)
				}
			})
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestIsEscape pins the os.Root error that escapeErr recognises by its
// text, so that a Go release that rewords it fails here, not silently.
func TestIsEscape(t *testing.T) {
	t.Parallel()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(base, "ws")
	writeTree(t, root, map[string]string{"sub/a.txt": "a"})
	writeTree(t, base, map[string]string{"out/x": "x"})
	for name, target := range map[string]string{"abs": filepath.Join(base, "out"), "rel": "../out", "in": "sub"} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	tests := []struct {
		name string
		want bool
	}{
		{"abs/x", true},
		{"rel/x", true},
		{"../out/x", true},
		{"in/a.txt", false},
		{"missing", false},
	}
	for _, tt := range tests {
		_, err := r.Stat(tt.name)
		if got := isEscape(err); got != tt.want {
			t.Errorf("isEscape(Stat(%q) = %v) = %v, want %v", tt.name, err, got, tt.want)
		}
	}
}
