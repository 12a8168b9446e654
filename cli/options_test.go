package cli

import (
	"io"
	"slices"
	"testing"
)

// Every flag of run, harness and resume is an option flag (optionFlags
// says what it sets) or one of the few that are not; every option flag is
// defined by some command. A new flag that forgets its option fails here.
func TestOptionFlagsAreOneTable(t *testing.T) {
	t.Parallel()
	notOptions := []string{"json", "workspace", "gateway", "session", "plan", "plan-file", "yes", "resend-unknown", "help"}
	var table []string
	for _, f := range optionFlags {
		table = append(table, f.name)
	}
	defined := map[string]bool{}
	for _, cmd := range newApp(nil, io.Discard, io.Discard).Commands {
		if cmd.Name != "run" && cmd.Name != "harness" && cmd.Name != "resume" {
			continue
		}
		for _, f := range cmd.Flags {
			name := f.Names()[0]
			defined[name] = true
			if !slices.Contains(table, name) && !slices.Contains(notOptions, name) {
				t.Errorf("agent %s --%s sets no option: add it to optionFlags, or to this test's flags that are none", cmd.Name, name)
			}
		}
	}
	for _, name := range table {
		if !defined[name] {
			t.Errorf("optionFlags names --%s, which no command defines", name)
		}
	}
}
