// Package approval holds the rules that make a tool call wait for a
// person's allow or deny before it runs (--ask, [approvals] ask;
// docs/PROTOCOL.md#waits). A rule is TOOL or TOOL(GLOB): the glob matches
// bash's command or a file tool's path; mcp__SERVER names every tool of an
// MCP server; effects names every side-effecting tool.
package approval

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Effects is the rule that names every side-effecting tool.
const Effects = "effects"

// Rule is one parsed rule.
type Rule struct {
	Text string // as written, e.g. "bash(git push*)"
	Tool string // "bash", "mcp__github", "effects"
	Glob string // "" matches every call of the tool
}

// Rules are a run's approval rules; the zero value asks nothing.
type Rules []Rule

// Parse reads rules, each entry possibly a comma-separated list (commas
// inside parentheses belong to the glob). Duplicates are dropped.
func Parse(entries []string) (Rules, error) {
	var out Rules
	seen := map[string]bool{}
	for _, entry := range entries {
		for _, text := range split(entry) {
			r, err := parse(text)
			if err != nil {
				return nil, err
			}
			if !seen[r.Text] {
				seen[r.Text] = true
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// split cuts a comma-separated list outside parentheses.
func split(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	out = append(out, s[start:])
	var kept []string
	for _, t := range out {
		if t = strings.TrimSpace(t); t != "" {
			kept = append(kept, t)
		}
	}
	return kept
}

func parse(text string) (Rule, error) {
	tool, glob, hasGlob := strings.Cut(text, "(")
	tool = strings.TrimSpace(tool)
	if hasGlob {
		if !strings.HasSuffix(glob, ")") {
			return Rule{}, fmt.Errorf("approval rule %q: a glob is closed by ')', as in bash(git push*)", text)
		}
		glob = strings.TrimSuffix(glob, ")")
		if glob == "" {
			return Rule{}, fmt.Errorf("approval rule %q: the glob in () is empty; write %s alone to ask for every call", text, tool)
		}
	}
	if !validTool(tool) {
		return Rule{}, fmt.Errorf("approval rule %q: want TOOL or TOOL(GLOB), e.g. bash, bash(git push*), write_file(*.go), mcp__SERVER or effects", text)
	}
	if tool == Effects && hasGlob {
		return Rule{}, fmt.Errorf("approval rule %q: effects takes no glob", text)
	}
	return Rule{Text: text, Tool: tool, Glob: glob}, nil
}

func validTool(name string) bool {
	if name == "" {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Call is what a rule is matched against.
type Call struct {
	Tool   string
	Args   string // the arguments as the model sent them (JSON)
	Effect bool   // the tool is a side effect
}

// Match returns the first rule that asks for call.
func (rs Rules) Match(call Call) (Rule, bool) {
	for _, r := range rs {
		if r.matches(call) {
			return r, true
		}
	}
	return Rule{}, false
}

func (r Rule) matches(c Call) bool {
	switch {
	case r.Tool == Effects:
		return c.Effect
	case strings.HasPrefix(r.Tool, "mcp__") && !strings.Contains(strings.TrimPrefix(r.Tool, "mcp__"), "__"):
		// mcp__SERVER: every tool of the server.
		if !strings.HasPrefix(c.Tool, r.Tool+"__") && c.Tool != r.Tool {
			return false
		}
	case r.Tool != c.Tool:
		return false
	}
	return r.Glob == "" || Glob(r.Glob, subject(c))
}

// subject is the text a glob matches: bash's command, a file tool's path,
// otherwise the arguments as sent.
func subject(c Call) string {
	var args map[string]any
	if json.Unmarshal([]byte(c.Args), &args) == nil {
		for _, key := range []string{"command", "path"} {
			if s, ok := args[key].(string); ok {
				return s
			}
		}
	}
	return c.Args
}

// Glob reports whether s matches pattern, where * is any run of
// characters (slashes and spaces too, so write_file(*.go) matches a file
// in any directory) and ? is one character.
func Glob(pattern, s string) bool {
	px, sx := 0, 0
	star, mark := -1, 0
	for sx < len(s) {
		switch {
		case px < len(pattern) && (pattern[px] == '?' || pattern[px] == s[sx]):
			px++
			sx++
		case px < len(pattern) && pattern[px] == '*':
			star, mark = px, sx
			px++
		case star >= 0:
			px = star + 1
			mark++
			sx = mark
		default:
			return false
		}
	}
	for px < len(pattern) && pattern[px] == '*' {
		px++
	}
	return px == len(pattern)
}
