package tools

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestWritesTo(t *testing.T) {
	t.Parallel()
	s, root := newTestSet(t, Options{Deny: []string{"bash"}}, map[string]string{"a.txt": "a", "dir/": ""})
	outside := t.TempDir()
	if err := os.Symlink(filepath.Join(outside, "x"), filepath.Join(root, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a.txt", filepath.Join(root, "alias")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		tool, args string
		want       []WriteTarget
	}{
		{"write_file", `{"path":"new/b.txt","content":"b"}`, []WriteTarget{{"new/b.txt", filepath.Join(root, "new", "b.txt")}}},
		{"edit_file", `{"path":"./dir/../a.txt","old_string":"a","new_string":"b"}`, []WriteTarget{{"a.txt", filepath.Join(root, "a.txt")}}},
		// A symlink names the file it leads to, so one file is one target.
		{"write_file", `{"path":"alias","content":"x"}`, []WriteTarget{{"a.txt", filepath.Join(root, "a.txt")}}},
		{"write_file", `{"path":"../escape.txt","content":"x"}`, nil},
		{"write_file", `{"path":"out","content":"x"}`, nil},
		{"write_file", `{"path":"a.txt"}`, nil},               // missing content: the tool refuses
		{"write_file", `{"path":"a.txt","content":"x",`, nil}, // not JSON
		{"edit_file", `{"path":"a.txt","old_string":"a","new_string":"b","extra":1}`, nil},
		{"read_file", `{"path":"a.txt"}`, nil},
		{"bash", `{"command":"echo > a.txt"}`, nil}, // not tracked, and disabled here
		{"nope", `{}`, nil},
	}
	for _, tt := range tests {
		if got := s.WritesTo(tt.tool, tt.args); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("WritesTo(%s, %s) = %+v, want %+v", tt.tool, tt.args, got, tt.want)
		}
	}
}
