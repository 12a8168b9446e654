package tools

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteFile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		files    map[string]string
		args     map[string]any
		wantOut  string
		wantFile string // workspace path whose content must equal content
		isErr    bool
	}{
		{name: "new file with parents", args: map[string]any{"path": "a/b/c.txt", "content": "hello"},
			wantOut: "wrote 5 bytes to a/b/c.txt", wantFile: "a/b/c.txt"},
		{name: "overwrite", files: map[string]string{"x.txt": "old old old"}, args: map[string]any{"path": "x.txt", "content": "new"},
			wantOut: "wrote 3 bytes to x.txt", wantFile: "x.txt"},
		{name: "empty content", args: map[string]any{"path": "empty", "content": ""},
			wantOut: "wrote 0 bytes to empty", wantFile: "empty"},
		{name: "path normalized", args: map[string]any{"path": "./d/../n.txt", "content": "é"},
			wantOut: "wrote 2 bytes to n.txt", wantFile: "n.txt"},
		{name: "directory", files: map[string]string{"d/": ""}, args: map[string]any{"path": "d", "content": "x"},
			wantOut: `"d" is a directory; give a file path`, isErr: true},
		{name: "parent is a file", files: map[string]string{"f": "x"}, args: map[string]any{"path": "f/g.txt", "content": "x"},
			wantOut: "write f/g.txt: create parent directories:", isErr: true},
		{name: "missing content", args: map[string]any{"path": "x"},
			wantOut: `invalid arguments for write_file: missing required argument "content"`, isErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, root := newTestSet(t, Options{}, tt.files)
			res := call(t, s, "write_file", tt.args)
			if res.IsError != tt.isErr || !strings.HasPrefix(res.Output, tt.wantOut) {
				t.Fatalf("result = %+v, want IsError=%v output %q", res, tt.isErr, tt.wantOut)
			}
			if tt.isErr {
				if len(res.Artifacts) != 0 {
					t.Fatalf("artifacts on error: %v", res.Artifacts)
				}
				return
			}
			content := tt.args["content"].(string)
			if got := readString(t, filepath.Join(root, tt.wantFile)); got != content {
				t.Fatalf("file = %q, want %q", got, content)
			}
			sum := sha256.Sum256([]byte(content))
			want := Artifact{Path: tt.wantFile, SHA256: hex.EncodeToString(sum[:]), Bytes: int64(len(content))}
			if len(res.Artifacts) != 1 || res.Artifacts[0] != want {
				t.Fatalf("artifacts = %+v, want %+v", res.Artifacts, want)
			}
			// No temporary files are left behind.
			ents, err := os.ReadDir(filepath.Dir(filepath.Join(root, tt.wantFile)))
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				if strings.Contains(e.Name(), ".tmp") {
					t.Fatalf("temporary file left: %s", e.Name())
				}
			}
		})
	}
}

func TestWriteFileModes(t *testing.T) {
	t.Parallel()
	s, root := newTestSet(t, Options{}, map[string]string{"run.sh": "#!/bin/sh\n"})
	if err := os.Chmod(filepath.Join(root, "run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	call(t, s, "write_file", map[string]any{"path": "run.sh", "content": "#!/bin/sh\necho hi\n"})
	call(t, s, "write_file", map[string]any{"path": "new.txt", "content": "x"})
	for name, want := range map[string]os.FileMode{"run.sh": 0o755, "new.txt": 0o644} {
		fi, err := os.Stat(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s mode = %v, want %v", name, fi.Mode().Perm(), want)
		}
	}
}

// Writing through a symlink that stays inside the workspace updates the
// target and keeps the link.
func TestWriteFileThroughInsideSymlink(t *testing.T) {
	t.Parallel()
	s, root := newTestSet(t, Options{}, map[string]string{"real/t.txt": "old"})
	if err := os.Symlink("real/t.txt", filepath.Join(root, "link.txt")); err != nil {
		t.Fatal(err)
	}
	res := call(t, s, "write_file", map[string]any{"path": "link.txt", "content": "new"})
	if res.IsError || res.Output != "wrote 3 bytes to real/t.txt" || res.Artifacts[0].Path != "real/t.txt" {
		t.Fatalf("result = %+v", res)
	}
	if got := readString(t, filepath.Join(root, "real/t.txt")); got != "new" {
		t.Fatalf("target = %q", got)
	}
	if fi, err := os.Lstat(filepath.Join(root, "link.txt")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("link.txt is no longer a symlink: %v %v", fi, err)
	}
}
