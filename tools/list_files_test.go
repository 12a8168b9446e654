package tools

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestListFiles(t *testing.T) {
	t.Parallel()
	files := map[string]string{
		"README.md":             "",
		"main.go":               "",
		"cmd/app/main.go":       "",
		"cmd/app/main_test.go":  "",
		"cmd/app/testdata/x.go": "",
		"docs/guide.md":         "",
		"empty/":                "",
		".git/config":           "",
		".agent/runs/r/m.json":  "",
		"sub/.git/HEAD":         "",
		".env":                  "",
	}
	tests := []struct {
		name  string
		args  string
		want  string
		isErr bool
	}{
		{name: "whole workspace", args: `{}`,
			want: ".env\nREADME.md\ncmd/\ncmd/app/\ncmd/app/main.go\ncmd/app/main_test.go\ncmd/app/testdata/\ncmd/app/testdata/x.go\n" +
				"docs/\ndocs/guide.md\nempty/\nmain.go\nsub/"},
		{name: "empty args string", args: ``,
			want: ".env\nREADME.md\ncmd/\ncmd/app/\ncmd/app/main.go\ncmd/app/main_test.go\ncmd/app/testdata/\ncmd/app/testdata/x.go\n" +
				"docs/\ndocs/guide.md\nempty/\nmain.go\nsub/"},
		{name: "subdirectory", args: `{"path":"cmd/app"}`,
			want: "cmd/app/main.go\ncmd/app/main_test.go\ncmd/app/testdata/\ncmd/app/testdata/x.go"},
		{name: "base name glob", args: `{"pattern":"*.go"}`,
			want: "cmd/app/main.go\ncmd/app/main_test.go\ncmd/app/testdata/x.go\nmain.go"},
		{name: "doublestar", args: `{"pattern":"**/*.go"}`,
			want: "cmd/app/main.go\ncmd/app/main_test.go\ncmd/app/testdata/x.go\nmain.go"},
		{name: "doublestar under dir", args: `{"pattern":"cmd/**/*_test.go"}`, want: "cmd/app/main_test.go"},
		{name: "slash pattern is anchored", args: `{"pattern":"app/*.go"}`, want: "no files match pattern \"app/*.go\" under ."},
		{name: "pattern relative to path", args: `{"path":"cmd","pattern":"app/*.go"}`,
			want: "cmd/app/main.go\ncmd/app/main_test.go"},
		{name: "directories only", args: `{"pattern":"**/"}`,
			want: "cmd/\ncmd/app/\ncmd/app/testdata/\ndocs/\nempty/\nsub/"},
		{name: "explicit .git path", args: `{"path":".git"}`, want: ".git/config"},
		{name: "file path", args: `{"path":"docs/guide.md"}`, want: "docs/guide.md"},
		{name: "empty dir", args: `{"path":"empty"}`, want: "empty is empty"},
		{name: "empty pattern matches all", args: `{"path":"docs","pattern":""}`, want: "docs/guide.md"},
		{name: "no match", args: `{"pattern":"*.rs"}`, want: `no files match pattern "*.rs" under .`},
		{name: "invalid pattern", args: `{"pattern":"[a"}`, isErr: true, want: `invalid pattern "[a": syntax error in pattern`},
		{name: "missing", args: `{"path":"nope"}`, isErr: true, want: `path "nope" does not exist`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, _ := newTestSet(t, Options{}, files)
			res := call(t, s, "list_files", tt.args)
			if res.IsError != tt.isErr || res.Output != tt.want {
				t.Fatalf("result = %+v\nwant IsError=%v output:\n%s", res, tt.isErr, tt.want)
			}
		})
	}
}

func TestListFilesCap(t *testing.T) {
	t.Parallel()
	files := map[string]string{}
	for i := 0; i < listFilesMax+50; i++ {
		files[fmt.Sprintf("f%04d.txt", i)] = ""
	}
	s, _ := newTestSet(t, Options{MaxOutput: 1 << 20}, files)
	res := call(t, s, "list_files", `{}`)
	lines := strings.Split(res.Output, "\n")
	if len(lines) != listFilesMax+1 {
		t.Fatalf("got %d lines, want %d entries and a note", len(lines), listFilesMax)
	}
	if lines[0] != "f0000.txt" || lines[listFilesMax-1] != "f0999.txt" {
		t.Fatalf("unexpected entries %q … %q", lines[0], lines[listFilesMax-1])
	}
	if want := "[listing stopped at 1000 entries; narrow it with path or pattern]"; lines[listFilesMax] != want {
		t.Fatalf("note = %q, want %q", lines[listFilesMax], want)
	}
}

func TestMatchSegs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern, path string
		want          bool
	}{
		{"**/*.go", "a.go", true},
		{"**/*.go", "a/b/c.go", true},
		{"a/**/c.go", "a/c.go", true},
		{"a/**/c.go", "a/b/b/c.go", true},
		{"a/**/c.go", "b/a/c.go", false},
		{"a/**", "a/b/c", true},
		{"a/*", "a/b/c", false},
		{"**/**/x", "x", true},
		{"a/?.go", "a/b.go", true},
		{"**", "", true},
		{"**", "a/b", true},
		{"**/", "a", false}, // the empty last segment matches no name
		{"a/**/b/**/c", "a/b/c", true},
		{"a/**/b/**/c", "a/x/b/y/z/c", true},
		{"a/**/b/**/c", "a/c/b", false},
		{"**/b/**", "a/b", true},
		{"**/b/**", "a/c", false},
		{"*/**/*", "a", false},
		{"*/**/*", "a/b", true},
		{"**/a/**/a/**/a", "a/a", false},
		{"**/a/**/a/**/a", "x/a/y/a/a", true},
		{"a", "", false},
		{"", "", true},
	}
	for _, tt := range tests {
		if got := matchSegs(strings.Split(tt.pattern, "/"), strings.Split(tt.path, "/")); got != tt.want {
			t.Errorf("matchSegs(%q, %q) = %v, want %v", tt.pattern, tt.path, got, tt.want)
		}
	}
}

// nastyGlob has many "**" separated by segments that match anything, the
// shape that makes a backtracking matcher take exponential time.
var nastyGlob = strings.Repeat("**/*/", 8) + "nomatch"

func TestMatchSegsLinear(t *testing.T) {
	t.Parallel()
	segs := strings.Split(strings.TrimSuffix(strings.Repeat("a/", 200), "/"), "/")
	pat := strings.Split(strings.Repeat("**/*/", 50)+"b", "/")
	done := make(chan bool, 1)
	go func() { done <- matchSegs(pat, segs) || !matchSegs(pat[:len(pat)-1], segs) }()
	select {
	case bad := <-done:
		if bad {
			t.Fatal("wrong answer")
		}
	case <-time.After(patience): // a safety net: it takes well under a millisecond
		t.Fatal("matchSegs takes exponential time")
	}
}

// TestListFilesManyDoublestar lists a deep tree with patterns full of
// "**": each must answer at once (a backtracking matcher took minutes).
func TestListFilesManyDoublestar(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat("a/", 40)
	files := map[string]string{deep + "x.txt": "", "top.txt": ""}
	tests := []struct {
		name, pattern, want string
	}{
		{"no match", nastyGlob, `no files match pattern "` + nastyGlob + `" under .`},
		{"match at the bottom", strings.Repeat("**/a/", 8) + "**/x.txt", deep + "x.txt"},
		{"consecutive", strings.Repeat("**/", 64) + "x.txt", deep + "x.txt"},
		{"anchored miss", "a/" + strings.Repeat("**/*/", 10) + "top.txt", `no files match pattern "a/` + strings.Repeat("**/*/", 10) + `top.txt" under .`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, _ := newTestSet(t, Options{}, files)
			done := make(chan Result, 1)
			go func() { done <- call(t, s, "list_files", map[string]any{"pattern": tt.pattern}) }()
			select {
			case res := <-done:
				if res.IsError || res.Output != tt.want {
					t.Fatalf("result = %+v, want %q", res, tt.want)
				}
			case <-time.After(patience): // a safety net: the call takes milliseconds
				t.Fatalf("list_files with %q did not finish", tt.pattern)
			}
		})
	}
}
