package approval

import (
	"strings"
	"testing"
)

func TestMatch(t *testing.T) {
	rules, err := Parse([]string{"bash(git push*),write_file(*.go)", "mcp__github", "effects", "read_file(secrets/*)"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		call Call
		rule string // "" when nothing asks
	}{
		{Call{Tool: "bash", Args: `{"command":"git push origin main"}`}, "bash(git push*)"},
		{Call{Tool: "bash", Args: `{"command":"git status"}`}, ""},
		{Call{Tool: "bash", Args: `{"command":"echo; git push"}`}, ""},
		{Call{Tool: "write_file", Args: `{"path":"cmd/main.go","content":"x"}`}, "write_file(*.go)"},
		{Call{Tool: "write_file", Args: `{"path":"README.md","content":"x.go"}`}, ""},
		{Call{Tool: "edit_file", Args: `{"path":"main.go"}`}, ""},
		{Call{Tool: "mcp__github__create_issue", Args: `{}`}, "mcp__github"},
		{Call{Tool: "mcp__githubx__create_issue", Args: `{}`}, ""},
		{Call{Tool: "send_email", Args: `{"to":"a@b"}`, Effect: true}, "effects"},
		{Call{Tool: "read_file", Args: `{"path":"secrets/key"}`}, "read_file(secrets/*)"},
		{Call{Tool: "read_file", Args: `not json`}, ""},
	}
	for _, tt := range tests {
		r, ok := rules.Match(tt.call)
		if ok != (tt.rule != "") || r.Text != tt.rule {
			t.Errorf("Match(%s %s) = %q, %v; want %q", tt.call.Tool, tt.call.Args, r.Text, ok, tt.rule)
		}
	}
	if _, ok := Rules(nil).Match(Call{Tool: "bash", Args: `{}`}); ok {
		t.Error("no rules asked for a call")
	}
}

func TestParseRefusesWhatIsNoRule(t *testing.T) {
	for _, bad := range []string{"bash(git push*", "bash()", "rm -rf", "effects(x)", "(x)"} {
		_, err := Parse([]string{bad})
		if err == nil || !strings.Contains(err.Error(), "approval rule") {
			t.Errorf("Parse(%q) = %v, want an error naming the rule", bad, err)
		}
	}
	rs, err := Parse([]string{" bash , bash", "", "grep(a,b)"})
	if err != nil || len(rs) != 2 || rs[1].Glob != "a,b" {
		t.Errorf("Parse = %+v, %v; want bash and grep(a,b) once each", rs, err)
	}
}

func TestGlob(t *testing.T) {
	for _, tt := range []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true}, {"a*c", "abbbc", true}, {"a*c", "abbb", false}, {"a?c", "abc", true},
		{"*.go", "x/y/z.go", true}, {"git push*", "git push", true}, {"*push*", "git push -f", true}, {"a", "ab", false},
	} {
		if got := Glob(tt.pattern, tt.s); got != tt.want {
			t.Errorf("Glob(%q, %q) = %v, want %v", tt.pattern, tt.s, got, tt.want)
		}
	}
}
