package tools

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEditFile(t *testing.T) {
	t.Parallel()
	const src = "package main\n\nfunc main() {\n\tprintln(\"hi\")\n\tprintln(\"hi\")\n}\n"
	tests := []struct {
		name    string
		content string // of f.go
		args    map[string]any
		wantOut string
		want    string // f.go afterwards
		isErr   bool
	}{
		{name: "unique", content: src,
			args:    map[string]any{"path": "f.go", "old_string": "func main() {", "new_string": "func run() {"},
			wantOut: "replaced 1 occurrence in f.go (line 3)",
			want:    strings.Replace(src, "func main", "func run", 1)},
		{name: "delete", content: "a\nb\nc\n",
			args:    map[string]any{"path": "f.go", "old_string": "b\n", "new_string": ""},
			wantOut: "replaced 1 occurrence in f.go (line 2)", want: "a\nc\n"},
		{name: "replace all", content: src,
			args:    map[string]any{"path": "f.go", "old_string": `"hi"`, "new_string": `"bye"`, "replace_all": true},
			wantOut: "replaced 2 occurrences in f.go (first at line 4)",
			want:    strings.ReplaceAll(src, `"hi"`, `"bye"`)},
		{name: "ambiguous", content: src,
			args:    map[string]any{"path": "f.go", "old_string": `println("hi")`, "new_string": "x"},
			wantOut: "old_string found 2 times in f.go; add surrounding context to make it unique, or set replace_all", isErr: true, want: src},
		{name: "not found", content: src,
			args:    map[string]any{"path": "f.go", "old_string": "func  main", "new_string": "x"},
			wantOut: "old_string not found in f.go", isErr: true, want: src},
		{name: "crlf file", content: "one\r\ntwo\r\nthree\r\n",
			args:    map[string]any{"path": "f.go", "old_string": "one\ntwo\n", "new_string": "1\n2\n"},
			wantOut: "replaced 1 occurrence in f.go (line 1)", want: "1\r\n2\r\nthree\r\n"},
		{name: "empty old_string", content: src,
			args:    map[string]any{"path": "f.go", "old_string": "", "new_string": "x"},
			wantOut: "old_string must not be empty", isErr: true, want: src},
		{name: "identical", content: src,
			args:    map[string]any{"path": "f.go", "old_string": "main", "new_string": "main"},
			wantOut: "old_string and new_string are identical", isErr: true, want: src},
		{name: "missing file", content: src,
			args:    map[string]any{"path": "g.go", "old_string": "a", "new_string": "b"},
			wantOut: `file "g.go" does not exist; use write_file to create it`, isErr: true, want: src},
		{name: "missing new_string", content: src,
			args:    map[string]any{"path": "f.go", "old_string": "a"},
			wantOut: `invalid arguments for edit_file: missing required argument "new_string"`, isErr: true, want: src},
		{name: "replace_all wrong type", content: src,
			args:    map[string]any{"path": "f.go", "old_string": "a", "new_string": "b", "replace_all": "yes"},
			wantOut: `invalid arguments for edit_file: argument "replace_all" must be a boolean, not string`, isErr: true, want: src},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, root := newTestSet(t, Options{}, map[string]string{"f.go": tt.content})
			res := call(t, s, "edit_file", tt.args)
			if res.IsError != tt.isErr || !strings.HasPrefix(res.Output, tt.wantOut) {
				t.Fatalf("result = %+v, want IsError=%v output %q", res, tt.isErr, tt.wantOut)
			}
			got := readString(t, filepath.Join(root, "f.go"))
			if got != tt.want {
				t.Fatalf("f.go = %q, want %q", got, tt.want)
			}
			if tt.isErr {
				if len(res.Artifacts) != 0 {
					t.Fatalf("artifacts on error: %v", res.Artifacts)
				}
				return
			}
			sum := sha256.Sum256([]byte(got))
			want := Artifact{Path: "f.go", SHA256: hex.EncodeToString(sum[:]), Bytes: int64(len(got))}
			if len(res.Artifacts) != 1 || res.Artifacts[0] != want {
				t.Fatalf("artifacts = %+v, want %+v", res.Artifacts, want)
			}
		})
	}
}

func TestEditFileKeepsMode(t *testing.T) {
	t.Parallel()
	s, root := newTestSet(t, Options{}, map[string]string{"run.sh": "echo a\n"})
	p := filepath.Join(root, "run.sh")
	if err := os.Chmod(p, 0o750); err != nil {
		t.Fatal(err)
	}
	if res := call(t, s, "edit_file", map[string]any{"path": "run.sh", "old_string": "a", "new_string": "b"}); res.IsError {
		t.Fatal(res.Output)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o750 {
		t.Fatalf("mode = %v, want 0750", fi.Mode().Perm())
	}
}
