package console

import (
	"fmt"
	"strings"
	"time"
)

// The words of the listings and reports: how an id, an age, a size or a
// long text is cut down to a table cell or a line.

// ShortID is the first 8 characters of an id: what people type, as a
// unique prefix.
func ShortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// OneLine is s on one line, its spaces collapsed, cut to n characters.
func OneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// DurationText is a default duration as people write it: 2m, 30m, 1h.
func DurationText(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// age says how long ago t was in one unit: 42s, 5m, 3h, 2d.
func age(t time.Time) string {
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// indented is s trimmed, its later lines indented as the first.
func indented(s string) string {
	return strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n  ")
}

// HumanBytes says a size in B, KiB, MiB or GiB.
func HumanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), -1
	for v >= unit && i < 2 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMG"[i])
}

// DidYouMean is the hint " (did you mean --FLAG?)" when the word typed
// looks like a typo of the flag guessed (Near), else "".
func DidYouMean(typed, guess string) string {
	if !Near(typed, strings.TrimLeft(guess, "-")) {
		return ""
	}
	return " (did you mean " + guess + "?)"
}

// Near reports whether typed looks like a typo of name, for a "did you
// mean" hint: at most one letter missed, added, wrong or swapped with its
// neighbour in a short name, two in a longer one.
func Near(typed, name string) bool {
	a, b := []rune(typed), []rune(name)
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	// d[i][j]: the edits that turn a[:i] into b[:j] (optimal string alignment).
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	limit := 2
	if len(b) <= 4 {
		limit = 1
	}
	return d[len(a)][len(b)] <= limit
}
