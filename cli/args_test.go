package cli

import (
	"io"
	"slices"
	"strings"
	"testing"
)

// --database is taken after any command that opens the store, as gateway
// and worker take it: it becomes the root flag it is.
func TestDatabaseAfterTheCommand(t *testing.T) {
	app := newApp(strings.NewReader(""), io.Discard, io.Discard)
	for _, tt := range []struct{ in, want string }{
		{"agent runs list --database postgres://u@h/db", "agent --database postgres://u@h/db runs list"},
		{"agent runs show 3f2a --database=postgres://u@h/db --json", "agent --database=postgres://u@h/db runs show --json 3f2a"},
		{"agent doctor --database postgres://u@h/db", "agent --database postgres://u@h/db doctor"},
		{"agent gateway --database postgres://u@h/db", "agent gateway --database postgres://u@h/db"},
		{"agent worker --database postgres://u@h/db", "agent worker --database postgres://u@h/db"},
	} {
		got, err := normalizeArgs(app, strings.Fields(tt.in))
		if err != nil || !slices.Equal(got, strings.Fields(tt.want)) {
			t.Errorf("normalizeArgs(%s) = %v, %v; want %s", tt.in, got, err, tt.want)
		}
	}
}
