package tools

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

// newTestSet returns a Set over a fresh workspace holding files (path ->
// content, slash paths, "dir/" for an empty directory), and the root.
func newTestSet(t *testing.T, opts Options, files map[string]string, extra ...Tool) (*Set, string) {
	t.Helper()
	root := t.TempDir()
	writeTree(t, root, files)
	ws, err := NewWorkspace(root)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSet(ws, opts, extra...)
	if err != nil {
		t.Fatal(err)
	}
	return s, ws.Root()
}

func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if name[len(name)-1] == '/' {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// call runs a tool through the Set; args is a JSON string or a value to marshal.
func call(t *testing.T, s *Set, name string, args any) Result {
	t.Helper()
	raw, ok := args.(string)
	if !ok {
		b, err := json.Marshal(args)
		if err != nil {
			t.Fatal(err)
		}
		raw = string(b)
	}
	return s.Run(context.Background(), name, raw)
}

// snapshotDir returns every path under dir with its content, to prove a
// refused call touched nothing.
func snapshotDir(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		entry := p
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			entry += "=" + string(b)
		}
		out = append(out, entry)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func readString(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
