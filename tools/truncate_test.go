package tools

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

var noteRE = regexp.MustCompile(`\n… \[truncated (\d+) bytes; showing first (\d+) and last (\d+) bytes\] …\n`)

func TestTruncate(t *testing.T) {
	t.Parallel()
	var lines strings.Builder
	for i := 1; i <= 2000; i++ {
		fmt.Fprintf(&lines, "line %04d\n", i)
	}
	tests := []struct {
		name      string
		in        string
		max       int
		wantCut   bool
		wantHead  string
		wantTail  string
		lineCut   bool // head ends and tail starts on a line boundary
		zeroMaxOK bool
	}{
		{name: "fits", in: "short", max: 100},
		{name: "exactly max", in: strings.Repeat("x", 100), max: 100},
		{name: "lines", in: lines.String(), max: 1000, wantCut: true,
			wantHead: "line 0001\nline 0002\n", wantTail: "line 1999\nline 2000\n", lineCut: true},
		{name: "one long line", in: strings.Repeat("abcdefghij", 1000), max: 500, wantCut: true,
			wantHead: "abcdefghij", wantTail: "abcdefghij"},
		{name: "multibyte runes", in: strings.Repeat("日本語", 5000), max: 1001, wantCut: true,
			wantHead: "日本語", wantTail: "日本語"},
		{name: "zero max means default", in: strings.Repeat("y", DefaultMaxOutput+1), max: 0, wantCut: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, cut := Truncate(tt.in, tt.max)
			if cut != tt.wantCut {
				t.Fatalf("cut = %v, want %v", cut, tt.wantCut)
			}
			if !cut {
				if out != tt.in {
					t.Fatalf("changed a text that fits: %q", out)
				}
				return
			}
			max := tt.max
			if max == 0 {
				max = DefaultMaxOutput
			}
			if len(out) > max {
				t.Fatalf("output is %d bytes, over %d", len(out), max)
			}
			if len(out) < max*3/4 {
				t.Fatalf("output is %d bytes; the budget %d is wasted", len(out), max)
			}
			if !utf8.ValidString(out) {
				t.Fatal("output is not valid UTF-8")
			}
			m := noteRE.FindStringSubmatchIndex(out)
			if m == nil {
				t.Fatalf("no note in %q", out)
			}
			head, tail := out[:m[0]], out[m[1]:]
			if !strings.HasPrefix(tt.in, head) || !strings.HasSuffix(tt.in, tail) {
				t.Fatal("head or tail is not from the input")
			}
			if !strings.HasPrefix(head, tt.wantHead) || !strings.HasSuffix(tail, tt.wantTail) {
				t.Fatalf("head %q… / …tail %q", head[:min(len(head), 30)], tail[max0(len(tail)-30):])
			}
			nums := noteRE.FindStringSubmatch(out)
			dropped, _ := strconv.Atoi(nums[1])
			first, _ := strconv.Atoi(nums[2])
			last, _ := strconv.Atoi(nums[3])
			if first != len(head) || last != len(tail) || dropped+first+last != len(tt.in) {
				t.Fatalf("note says %d+%d+%d, head %d tail %d total %d", first, dropped, last, len(head), len(tail), len(tt.in))
			}
			if tt.lineCut && (!strings.HasSuffix(head, "\n") || !strings.HasPrefix(tail, "line ")) {
				t.Fatalf("not cut on lines: head ends %q, tail starts %q", head[len(head)-5:], tail[:5])
			}
		})
	}
}

func max0(n int) int {
	if n < 0 {
		return 0
	}
	return n
}
