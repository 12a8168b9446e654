package tools

import (
	"fmt"
	"strings"
	"testing"
)

func numberedLines(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "line%d\n", i)
	}
	return b.String()
}

func TestReadFile(t *testing.T) {
	t.Parallel()
	files := map[string]string{
		"ten.txt":    numberedLines(10),
		"long.txt":   numberedLines(2500),
		"nonl.txt":   "a\nb\nc",
		"empty.txt":  "",
		"bin.dat":    "abc\x00def",
		"crlf.txt":   "a\r\nb\r\n",
		"dir/x.txt":  "x",
		"wide.txt":   strings.Repeat(strings.Repeat("w", 49)+"\n", 100),
		"unicode.md": "héllo wörld\n",
	}
	tests := []struct {
		name    string
		opts    Options
		args    string
		want    string // exact output, or a substring when contains is set
		partial bool
		isErr   bool
	}{
		{name: "whole file", args: `{"path":"ten.txt"}`, want: numberedLines(10)},
		{name: "whole file without final newline", args: `{"path":"nonl.txt"}`, want: "a\nb\nc"},
		{name: "unicode", args: `{"path":"unicode.md"}`, want: "héllo wörld\n"},
		{name: "crlf kept", args: `{"path":"crlf.txt"}`, want: "a\r\nb\r\n"},
		{name: "offset and limit", args: `{"path":"ten.txt","offset":3,"limit":2}`,
			want: "line3\nline4\n[showing lines 3-4 of 10; use offset=5 to read more]"},
		{name: "offset to the end", args: `{"path":"ten.txt","offset":9}`,
			want: "line9\nline10\n[showing lines 9-10 of 10]"},
		{name: "offset zero means start", args: `{"path":"ten.txt","offset":0,"limit":1}`,
			want: "line1\n[showing lines 1-1 of 10; use offset=2 to read more]"},
		{name: "partial without final newline", args: `{"path":"nonl.txt","offset":3}`,
			want: "c\n[showing lines 3-3 of 3]"},
		{name: "default limit", opts: Options{MaxOutput: 1 << 20}, args: `{"path":"long.txt"}`, partial: true,
			want: "line2000\n[showing lines 1-2000 of 2500; use offset=2001 to read more]"},
		{name: "byte budget pages cleanly", opts: Options{MaxOutput: 1000}, args: `{"path":"wide.txt"}`, partial: true,
			want: "[showing lines 1-16 of 100 (output size limit); use offset=17 to read more]"},
		{name: "empty", args: `{"path":"empty.txt"}`, want: "[empty.txt is empty]"},
		{name: "past the end", args: `{"path":"ten.txt","offset":11}`, isErr: true,
			want: "offset 11 is past the end of ten.txt, which has 10 lines"},
		{name: "negative offset", args: `{"path":"ten.txt","offset":-1}`, isErr: true, partial: true, want: "offset must be 1 or more"},
		{name: "negative limit", args: `{"path":"ten.txt","limit":-5}`, isErr: true, partial: true, want: "limit must be 1 or more"},
		{name: "binary", args: `{"path":"bin.dat"}`, isErr: true, partial: true, want: `"bin.dat" is a binary file`},
		{name: "directory", args: `{"path":"dir"}`, isErr: true, partial: true, want: `"dir" is a directory`},
		{name: "missing", args: `{"path":"nope.txt"}`, isErr: true, want: `file "nope.txt" does not exist`},
		{name: "missing path", args: `{}`, isErr: true, want: `invalid arguments for read_file: missing required argument "path"`},
		{name: "wrong type", args: `{"path":"ten.txt","offset":"3"}`, isErr: true, partial: true, want: `argument "offset" must be an integer, not string`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, _ := newTestSet(t, tt.opts, files)
			res := call(t, s, "read_file", tt.args)
			if res.IsError != tt.isErr {
				t.Fatalf("IsError = %v, output %q", res.IsError, res.Output)
			}
			if tt.partial {
				if !strings.Contains(res.Output, tt.want) {
					t.Fatalf("output = %q, want it to contain %q", res.Output, tt.want)
				}
			} else if res.Output != tt.want {
				t.Fatalf("output = %q, want %q", res.Output, tt.want)
			}
			if max := tt.opts.MaxOutput; max > 0 && len(res.Output) > max {
				t.Fatalf("output is %d bytes, over the %d budget", len(res.Output), max)
			}
			if res.Truncated {
				t.Fatalf("read_file should page, not truncate: %q", res.Output)
			}
		})
	}
}
