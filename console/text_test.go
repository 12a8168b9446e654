package console

import "testing"

// A typo is near the name it misses; another word is not.
func TestNear(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		typed, name string
		want        bool
	}{
		{"max-turn", "max-turns", true},
		{"max_turns", "max-turns", true},
		{"maxturns", "max-turns", true},
		{"max-tunrs", "max-turns", true},
		{"modle", "model", true},
		{"jsn", "json", true},
		{"max-turns", "max-turns", true},
		{"frobnicate", "workspace", false},
		{"bogus", "json", false},
		{"xml", "json", false},
		{"timeout", "max-turns", false},
		{"", "json", false},
	} {
		if got := Near(tt.typed, tt.name); got != tt.want {
			t.Errorf("Near(%q, %q) = %v, want %v", tt.typed, tt.name, got, tt.want)
		}
	}
	if got := DidYouMean("max-turn", "--max-turns"); got != " (did you mean --max-turns?)" {
		t.Errorf("DidYouMean = %q", got)
	}
	if got := DidYouMean("flag provided but not defined", "--json"); got != "" {
		t.Errorf("DidYouMean of no typo = %q", got)
	}
}
