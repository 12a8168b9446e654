package tools

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// DefaultMaxOutput is the byte budget of a tool result when Options.MaxOutput is zero.
const DefaultMaxOutput = 30000

// noteReserve is the room kept for the truncation note, so that a truncated
// output never exceeds the budget.
const noteReserve = 96

// Truncate returns s unchanged when it fits in max bytes. Otherwise it keeps
// about half the budget from the head and half from the tail, cut on rune
// (and where possible line) boundaries, joined by a note saying what was
// dropped; the result is at most max bytes and the bool is true. Errors and
// stack traces tend to sit at the end of output, which is why the tail is kept.
func Truncate(s string, max int) (string, bool) {
	return truncateTotal(s, len(s), max)
}

// truncateTotal is Truncate for text whose middle may already be gone: s is
// the first and last bytes of a text that was total bytes long, and s is at
// least as long as each kept half. The bash tool uses it to bound memory.
func truncateTotal(s string, total, max int) (string, bool) {
	if max <= 0 {
		max = DefaultMaxOutput
	}
	if total <= max && len(s) == total {
		return s, false
	}
	half := (max - noteReserve) / 2
	if half < 0 {
		half = 0
	}
	head := cutHead(s, half)
	tail := cutTail(s, half)
	note := fmt.Sprintf("\n… [truncated %d bytes; showing first %d and last %d bytes] …\n",
		total-len(head)-len(tail), len(head), len(tail))
	return head + note + tail, true
}

// cutHead returns a prefix of s of at most n bytes, ending after a newline
// when one falls in the second half of that prefix, else on a rune boundary.
func cutHead(s string, n int) string {
	if n >= len(s) {
		return s
	}
	if i := strings.LastIndexByte(s[:n], '\n'); i >= n/2 {
		return s[:i+1]
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// cutTail returns a suffix of s of at most n bytes, starting after a newline
// when one falls in the first half of that suffix, else on a rune boundary.
func cutTail(s string, n int) string {
	if n >= len(s) {
		return s
	}
	start := len(s) - n
	if i := strings.IndexByte(s[start:], '\n'); i >= 0 && i < n/2 {
		return s[start+i+1:]
	}
	for start < len(s) && !utf8.RuneStart(s[start]) {
		start++
	}
	return s[start:]
}
