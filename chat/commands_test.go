package chat

import (
	"strings"
	"testing"
)

func TestHarnessLike(t *testing.T) {
	long := strings.Repeat("word ", 60)
	for msg, want := range map[string]bool{
		"fix the typo in README":                                 false,
		"1. add a flag\n2. test it\n3. document it":              true,
		"- parse the file\n- validate it\n* write the report":    true,
		"1. one thing\n2. another":                               false,
		long + "first, read the logs; then fix it, then test it": true,
		long: false,
		"first, read the logs; then fix the bug, then test it all": false, // short
	} {
		if got := harnessLike(msg); got != want {
			t.Errorf("harnessLike(%q) = %v, want %v", msg, got, want)
		}
	}
}
