package tools

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// escapeFixture builds base/ws (the workspace) next to base/outside, with
// symlinks inside the workspace that lead out in every way we know of.
func escapeFixture(t *testing.T) (ws *Workspace, root, outside string) {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root = filepath.Join(base, "ws")
	outside = filepath.Join(base, "outside")
	writeTree(t, root, map[string]string{"a.txt": "alpha\n", "sub/b.txt": "beta\n"})
	writeTree(t, outside, map[string]string{"secret.txt": "TOPSECRET\n"})
	links := map[string]string{
		"link_out":      outside,                              // symlinked dir, absolute
		"link_rel_out":  "../outside",                         // symlinked dir, relative
		"file_link_out": filepath.Join(outside, "secret.txt"), // symlinked file
		"dangling_out":  filepath.Join(outside, "nope.txt"),   // dangling, target outside
		"dangling_in":   "new.txt",                            // dangling, target inside
		"link_in":       "sub",                                // symlinked dir, inside
		"loop":          "loop",
		"sub/up":        "..",    // back to the root
		"sub/upup":      "../..", // to base: outside
		"tmp_link":      os.TempDir(),
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	ws, err = NewWorkspace(root)
	if err != nil {
		t.Fatal(err)
	}
	return ws, root, outside
}

func TestNewWorkspace(t *testing.T) {
	t.Parallel()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	writeTree(t, base, map[string]string{"dir/": "", "file": "x"})
	if err := os.Symlink(filepath.Join(base, "dir"), filepath.Join(base, "alias")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, dir, wantRoot, wantErr string
	}{
		{name: "dir", dir: filepath.Join(base, "dir"), wantRoot: filepath.Join(base, "dir")},
		{name: "symlink resolved", dir: filepath.Join(base, "alias"), wantRoot: filepath.Join(base, "dir")},
		{name: "missing", dir: filepath.Join(base, "missing"), wantErr: "no such directory"},
		{name: "file", dir: filepath.Join(base, "file"), wantErr: "not a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ws, err := NewWorkspace(tt.dir)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ws.Root() != tt.wantRoot {
				t.Fatalf("Root() = %q, want %q", ws.Root(), tt.wantRoot)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	ws, root, outside := escapeFixture(t)
	alias := filepath.Join(filepath.Dir(root), "alias")
	if err := os.Symlink(root, alias); err != nil {
		t.Fatal(err)
	}
	const out = "outside" // wantRel marker: an *OutsideError is expected
	tests := []struct {
		path    string
		wantRel string
		wantErr string // for errors that are not *OutsideError
	}{
		{path: "a.txt", wantRel: "a.txt"},
		{path: "./sub/../a.txt", wantRel: "a.txt"},
		{path: ".", wantRel: "."},
		{path: "sub/", wantRel: "sub"},
		{path: "new/dir/file.txt", wantRel: "new/dir/file.txt"},
		{path: "a.txt/x", wantRel: "a.txt/x"}, // left for the operation to fail
		{path: filepath.Join(root, "a.txt"), wantRel: "a.txt"},
		{path: filepath.Join(alias, "sub", "b.txt"), wantRel: "sub/b.txt"}, // absolute through an alias of the root
		{path: "link_in/b.txt", wantRel: "sub/b.txt"},
		{path: "dangling_in", wantRel: "new.txt"},
		{path: "sub/up/a.txt", wantRel: "a.txt"},
		{path: "link_out/../ws/a.txt", wantRel: "a.txt"}, // ".." applies to the link's target, as in the kernel
		{path: "..", wantRel: out},
		{path: "../outside/secret.txt", wantRel: out},
		{path: "sub/../../outside", wantRel: out},
		{path: "nope/../../x", wantRel: out},
		{path: "/etc/passwd", wantRel: out},
		{path: "/", wantRel: out},
		{path: outside, wantRel: out},
		{path: "link_out", wantRel: out},
		{path: "link_out/secret.txt", wantRel: out},
		{path: "link_out/new/deep.txt", wantRel: out},
		{path: "link_rel_out/x", wantRel: out},
		{path: "file_link_out", wantRel: out},
		{path: "dangling_out", wantRel: out},
		{path: "sub/upup", wantRel: out},
		{path: "sub/upup/outside/secret.txt", wantRel: out},
		{path: "tmp_link/x", wantRel: out},
		{path: "loop", wantErr: "too many levels of symbolic links"},
		{path: "", wantErr: "path is empty"},
		{path: "a\x00b", wantErr: "NUL"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			abs, rel, err := ws.Resolve(tt.path)
			switch {
			case tt.wantRel == out:
				var oe *OutsideError
				if !errors.As(err, &oe) {
					t.Fatalf("Resolve(%q) = %q, %q, %v; want an OutsideError", tt.path, abs, rel, err)
				}
				if want := `path "` + tt.path + `" is outside the workspace`; !strings.HasPrefix(err.Error(), want) {
					t.Fatalf("error = %q, want prefix %q", err, want)
				}
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Resolve(%q) err = %v, want %q", tt.path, err, tt.wantErr)
				}
			default:
				if err != nil {
					t.Fatalf("Resolve(%q): %v", tt.path, err)
				}
				if rel != tt.wantRel {
					t.Fatalf("rel = %q, want %q", rel, tt.wantRel)
				}
				if want := filepath.Join(root, filepath.FromSlash(tt.wantRel)); abs != want {
					t.Fatalf("abs = %q, want %q", abs, want)
				}
			}
		})
	}
}

// TestConfinement attacks every file tool with paths that lead outside and
// checks that each is refused and that nothing outside changed.
func TestConfinement(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		tool string
		args map[string]any
	}{
		{"write dotdot", "write_file", map[string]any{"path": "../outside/new.txt", "content": "x"}},
		{"write absolute outside", "write_file", map[string]any{"path": "OUTSIDE/new.txt", "content": "x"}},
		{"write symlinked parent", "write_file", map[string]any{"path": "link_out/new.txt", "content": "x"}},
		{"write symlinked parent deep", "write_file", map[string]any{"path": "link_rel_out/d/e/new.txt", "content": "x"}},
		{"write dangling symlink out", "write_file", map[string]any{"path": "dangling_out", "content": "x"}},
		{"write through symlink", "write_file", map[string]any{"path": "file_link_out", "content": "pwned"}},
		{"write tmp", "write_file", map[string]any{"path": "tmp_link/UNIQUE", "content": "x"}},
		{"edit through symlink", "edit_file", map[string]any{"path": "file_link_out", "old_string": "TOPSECRET", "new_string": "pwned"}},
		{"edit dotdot", "edit_file", map[string]any{"path": "../outside/secret.txt", "old_string": "TOPSECRET", "new_string": "pwned"}},
		{"edit absolute", "edit_file", map[string]any{"path": "OUTSIDE/secret.txt", "old_string": "TOPSECRET", "new_string": "pwned"}},
		{"read etc passwd", "read_file", map[string]any{"path": "/etc/passwd"}},
		{"read dotdot", "read_file", map[string]any{"path": "../outside/secret.txt"}},
		{"read through symlink", "read_file", map[string]any{"path": "file_link_out"}},
		{"read symlinked parent", "read_file", map[string]any{"path": "link_out/secret.txt"}},
		{"list symlinked dir", "list_files", map[string]any{"path": "link_out"}},
		{"list dotdot", "list_files", map[string]any{"path": ".."}},
		{"list absolute", "list_files", map[string]any{"path": "/tmp"}},
		{"grep symlinked dir", "grep", map[string]any{"pattern": "TOPSECRET", "path": "link_out"}},
		{"grep dotdot", "grep", map[string]any{"pattern": "TOPSECRET", "path": "../outside"}},
		{"grep through symlink", "grep", map[string]any{"pattern": "TOPSECRET", "path": "file_link_out"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ws, _, outside := escapeFixture(t)
			s, err := NewSet(ws, Options{})
			if err != nil {
				t.Fatal(err)
			}
			// A name no other run uses for the file that must not appear in the system temp dir.
			unique := "agent-escape-" + filepath.Base(filepath.Dir(filepath.Dir(outside))) // TempDir's random parent
			if p, ok := tt.args["path"].(string); ok {
				p = strings.Replace(p, "OUTSIDE", outside, 1)
				tt.args["path"] = strings.Replace(p, "UNIQUE", unique, 1)
			}
			before := snapshotDir(t, outside)
			res := call(t, s, tt.tool, tt.args)
			if !res.IsError || !strings.Contains(res.Output, "is outside the workspace") {
				t.Fatalf("result = %+v, want an outside-the-workspace error", res)
			}
			if strings.Contains(res.Output, "TOPSECRET") {
				t.Fatalf("output leaks the outside file: %q", res.Output)
			}
			if len(res.Artifacts) != 0 {
				t.Fatalf("artifacts = %v, want none", res.Artifacts)
			}
			if after := snapshotDir(t, outside); strings.Join(after, "\n") != strings.Join(before, "\n") {
				t.Fatalf("outside changed:\nbefore %q\nafter  %q", before, after)
			}
			if _, err := os.Stat(filepath.Join(os.TempDir(), unique)); err == nil {
				t.Fatal("file created in the system temp dir")
			}
		})
	}
}

// TestWalkDoesNotEscape checks that recursive tools over the whole
// workspace neither enter symlinked directories nor read linked files
// outside it.
func TestWalkDoesNotEscape(t *testing.T) {
	t.Parallel()
	ws, _, _ := escapeFixture(t)
	s, err := NewSet(ws, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res := call(t, s, "grep", map[string]any{"pattern": "TOPSECRET"}); res.IsError || res.Output != "no matches" {
		t.Fatalf("grep = %+v, want no matches", res)
	}
	res := call(t, s, "list_files", map[string]any{})
	if res.IsError || strings.Contains(res.Output, "secret.txt") {
		t.Fatalf("list_files = %+v, want no entry from outside", res)
	}
	// Links are listed as entries but never entered.
	for _, want := range []string{"link_out\n", "link_in\n", "sub/b.txt\n"} {
		if !strings.Contains(res.Output+"\n", want) {
			t.Fatalf("list_files output lacks %q:\n%s", want, res.Output)
		}
	}
	if strings.Contains(res.Output, "link_in/") {
		t.Fatalf("list_files entered a symlinked dir:\n%s", res.Output)
	}
	// A link to a file inside the workspace is searched under its own name.
	if err := os.Symlink("a.txt", filepath.Join(ws.Root(), "a_link")); err != nil {
		t.Fatal(err)
	}
	res = call(t, s, "grep", map[string]any{"pattern": "alpha"})
	if res.Output != "a.txt:1: alpha\na_link:1: alpha" {
		t.Fatalf("grep = %q", res.Output)
	}
}
