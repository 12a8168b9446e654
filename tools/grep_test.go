package tools

import (
	"fmt"
	"strings"
	"testing"
)

func TestGrep(t *testing.T) {
	t.Parallel()
	files := map[string]string{
		"main.go":        "package main\n\nfunc main() {\n\trun()\n}\n",
		"lib/run.go":     "package lib\n\nfunc Run() error { return nil }\r\n",
		"notes.txt":      "TODO: write docs\nnothing here\nFIXME later\n",
		"bin.dat":        "func main\x00binary",
		".git/x":         "func main() {}\n",
		".agent/log":     "func main() {}\n",
		"wide/line.js":   "var a=1;" + strings.Repeat("x", 1000) + "func q(){}\n",
		"unicode/ü.txt":  "grüße\n",
		"deep/a/b/c.txt": "needle\n",
	}
	tests := []struct {
		name  string
		args  string
		want  string
		isErr bool
	}{
		{name: "whole workspace", args: `{"pattern":"^func \\w+\\("}`,
			want: "lib/run.go:3: func Run() error { return nil }\nmain.go:3: func main() {"},
		{name: "alternation", args: `{"pattern":"TODO|FIXME"}`,
			want: "notes.txt:1: TODO: write docs\nnotes.txt:3: FIXME later"},
		{name: "case insensitive", args: `{"pattern":"(?i)todo"}`, want: "notes.txt:1: TODO: write docs"},
		{name: "single file", args: `{"pattern":"func","path":"main.go"}`, want: "main.go:3: func main() {"},
		{name: "directory", args: `{"pattern":"needle","path":"deep"}`, want: "deep/a/b/c.txt:1: needle"},
		{name: "unicode", args: `{"pattern":"grüß"}`, want: "unicode/ü.txt:1: grüße"},
		{name: "long line clipped", args: `{"pattern":"var a=1","path":"wide"}`,
			want: "wide/line.js:1: var a=1;" + strings.Repeat("x", grepMaxLine-len("var a=1;")) + " …"},
		{name: "no matches", args: `{"pattern":"zebra"}`, want: "no matches"},
		{name: "invalid regexp", args: `{"pattern":"a(b"}`, isErr: true,
			want: "invalid regular expression \"a(b\": error parsing regexp: missing closing ): `a(b` (Go RE2 syntax: no lookarounds or backreferences)"},
		{name: "empty pattern", args: `{"pattern":""}`, isErr: true, want: "pattern is empty"},
		{name: "missing pattern", args: `{"path":"."}`, isErr: true, want: `invalid arguments for grep: missing required argument "pattern"`},
		{name: "missing path", args: `{"pattern":"a","path":"nope"}`, isErr: true, want: `path "nope" does not exist`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, _ := newTestSet(t, Options{}, files)
			res := call(t, s, "grep", tt.args)
			if res.IsError != tt.isErr || res.Output != tt.want {
				t.Fatalf("result = %+v\nwant IsError=%v output:\n%s", res, tt.isErr, tt.want)
			}
		})
	}
}

func TestGrepCap(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	for i := 1; i <= grepMaxMatches+10; i++ {
		fmt.Fprintf(&b, "hit %d\n", i)
	}
	s, _ := newTestSet(t, Options{MaxOutput: 1 << 20}, map[string]string{"a.txt": b.String(), "b.txt": "hit\n"})
	res := call(t, s, "grep", `{"pattern":"hit"}`)
	lines := strings.Split(res.Output, "\n")
	if len(lines) != grepMaxMatches+1 {
		t.Fatalf("got %d lines, want %d matches and a note", len(lines), grepMaxMatches)
	}
	if lines[grepMaxMatches-1] != "a.txt:500: hit 500" {
		t.Fatalf("last match = %q", lines[grepMaxMatches-1])
	}
	if want := "[stopped after 500 matches; narrow the pattern or path]"; lines[grepMaxMatches] != want {
		t.Fatalf("note = %q, want %q", lines[grepMaxMatches], want)
	}
}
