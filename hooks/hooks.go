// Package hooks runs the operator's commands at points of a run, in
// Claude Code's protocol (docs/PROTOCOL.md#hooks): which hooks a run has
// (config.toml's [hooks] and a --settings file, in the shape of Claude
// Code's settings.json), which of them an event matches, and running one:
// Claude's JSON on its stdin, its exit code and stdout read as Claude
// reads them. The loop decides what a hook's answer does (package runner).
package hooks

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"agent/config"
)

// The events a run fires, by Claude Code's names.
const (
	SessionStart     = "SessionStart"
	UserPromptSubmit = "UserPromptSubmit"
	PreToolUse       = "PreToolUse"
	PostToolUse      = "PostToolUse"
	Stop             = "Stop"
	SubagentStop     = "SubagentStop"
	PreCompact       = "PreCompact"
	Notification     = "Notification"
)

// Events are every event a run fires.
var Events = []string{SessionStart, UserPromptSubmit, PreToolUse, PostToolUse, Stop, SubagentStop, PreCompact, Notification}

// claudeOnly are events Claude Code has and agent does not fire: a
// settings file written for Claude that has them still loads, and the
// run warns that they do not run.
var claudeOnly = []string{"SessionEnd", "PermissionRequest", "PermissionDenied", "PostToolUseFailure", "SubagentStart",
	"PostToolBatch", "TaskCreated", "TaskCompleted", "TeammateIdle", "ConfigChange", "CwdChanged", "FileChanged",
	"InstructionsLoaded", "StopFailure", "PostCompact", "WorktreeCreate", "WorktreeRemove", "Elicitation", "ElicitationResult"}

// DefaultTimeout is how long a hook may run when it says nothing.
const DefaultTimeout = 60 * time.Second

// Hook is one command to run at an event.
type Hook struct {
	Event   string
	Command string
	Timeout time.Duration
}

// group is a matcher and the hooks it runs.
type group struct {
	match func(names []string) bool
	hooks []Hook
}

// Set is a run's hooks. The nil Set has none.
type Set struct {
	groups map[string][]group
	// Ignored says what the files name that agent does not run (events
	// only Claude Code has), for the run to warn about.
	Ignored []string
}

// ConfigError is hooks that cannot work: a file that is no settings.json,
// an unknown event, a matcher that is no regular expression, a hook with
// no command. Source names the file.
type ConfigError struct {
	Source string
	Msg    string
}

func (e *ConfigError) Error() string { return e.Source + ": " + e.Msg }

// Configured returns the hooks of home's config.toml (none when home is
// "") and of the settings file (none when ""), as a run process reads
// them once.
func Configured(home, settings string) (*Set, error) {
	var f config.File
	path := "config.toml"
	if home != "" {
		var err error
		if f, path, err = config.ReadFile(home); err != nil {
			return nil, err
		}
	}
	return Load(f.Hooks, path, settings)
}

// Load returns the hooks of config.toml (fromConfig, read from
// configPath) and then those of the settings file, whose only key read
// is "hooks" (Claude Code's settings.json); both run.
func Load(fromConfig map[string][]config.HookMatcher, configPath, settings string) (*Set, error) {
	s := &Set{groups: map[string][]group{}}
	if err := s.add(fromConfig, configPath, "hooks."); err != nil {
		return nil, err
	}
	if settings == "" {
		return s, nil
	}
	raw, err := os.ReadFile(settings)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, &ConfigError{Source: settings, Msg: "no such file"}
	case err != nil:
		return nil, &ConfigError{Source: settings, Msg: err.Error()}
	}
	var file struct {
		Hooks map[string]json.RawMessage `json:"hooks"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		return nil, &ConfigError{Source: settings, Msg: "not a settings.json: " + jsonProblem("", err)}
	}
	byEvent := map[string][]config.HookMatcher{}
	for ev, raw := range file.Hooks {
		var ms []config.HookMatcher
		if err := json.Unmarshal(raw, &ms); err != nil {
			return nil, &ConfigError{Source: settings, Msg: jsonProblem(`"hooks".`+ev, err)}
		}
		byEvent[ev] = ms
	}
	if err := s.add(byEvent, settings, `"hooks".`); err != nil {
		return nil, err
	}
	return s, nil
}

// jsonProblem says what is wrong with the JSON at where, on one line.
func jsonProblem(where string, err error) string {
	var typ *json.UnmarshalTypeError
	if !errors.As(err, &typ) {
		return strings.TrimSpace(where + " " + err.Error())
	}
	at := where
	if typ.Field != "" {
		at += "[…]." + typ.Field
	}
	return fmt.Sprintf("%s must be %s, not %s", strings.TrimPrefix(at, "[…]."), article(typ.Type.Kind().String()), typ.Value)
}

func article(kind string) string {
	switch kind {
	case "slice":
		return "a list"
	case "map", "struct":
		return "an object"
	case "float64":
		return "a number"
	}
	return "a " + kind
}

// add checks the hooks of one source and adds them; where names the
// hooks key in it for messages.
func (s *Set) add(byEvent map[string][]config.HookMatcher, source, where string) error {
	for _, ev := range slices.Sorted(maps.Keys(byEvent)) {
		if !slices.Contains(Events, ev) {
			if slices.Contains(claudeOnly, ev) {
				s.Ignored = append(s.Ignored, fmt.Sprintf("%s: %s hooks do not run: agent fires %s", source, ev, strings.Join(Events, ", ")))
				continue
			}
			return &ConfigError{Source: source, Msg: fmt.Sprintf("%s%s is no hook event; the events are %s", where, ev, strings.Join(Events, ", "))}
		}
		for i, m := range byEvent[ev] {
			at := fmt.Sprintf("%s%s[%d]", where, ev, i)
			match, err := compileMatcher(m.Matcher)
			if err != nil {
				return &ConfigError{Source: source, Msg: fmt.Sprintf("%s.matcher %q is no regular expression: %v", at, m.Matcher, err)}
			}
			g := group{match: match}
			for j, h := range m.Hooks {
				at := fmt.Sprintf("%s.hooks[%d]", at, j)
				switch {
				case h.Type != "command":
					return &ConfigError{Source: source, Msg: fmt.Sprintf("%s.type is %q: only \"command\" hooks run (prompt and agent hooks do not)", at, h.Type)}
				case strings.TrimSpace(h.Command) == "":
					return &ConfigError{Source: source, Msg: at + ".command is empty"}
				case h.Timeout < 0:
					return &ConfigError{Source: source, Msg: fmt.Sprintf("%s.timeout must be a positive number of seconds, not %v", at, h.Timeout)}
				}
				timeout := DefaultTimeout
				if h.Timeout > 0 {
					timeout = time.Duration(h.Timeout * float64(time.Second))
				}
				g.hooks = append(g.hooks, Hook{Event: ev, Command: h.Command, Timeout: timeout})
			}
			s.groups[ev] = append(s.groups[ev], g)
		}
	}
	return nil
}

// plainMatcher is a matcher Claude Code compares as names, not as a
// regular expression: "Bash", "Edit|Write".
var plainMatcher = regexp.MustCompile(`^[A-Za-z0-9_|]+$`)

// compileMatcher reads a matcher as Claude Code does: empty or "*"
// matches everything, letters, digits, _ and | are names (exactly), and
// anything else is a regular expression found anywhere in a name.
func compileMatcher(m string) (func(names []string) bool, error) {
	m = strings.TrimSpace(m)
	switch {
	case m == "" || m == "*":
		return func([]string) bool { return true }, nil
	case plainMatcher.MatchString(m):
		want := strings.Split(m, "|")
		return func(names []string) bool {
			return slices.ContainsFunc(names, func(n string) bool { return slices.Contains(want, n) })
		}, nil
	}
	re, err := regexp.Compile(m)
	if err != nil {
		return nil, err
	}
	return func(names []string) bool { return slices.ContainsFunc(names, re.MatchString) }, nil
}

// Has reports whether the set has hooks for ev.
func (s *Set) Has(ev string) bool { return s != nil && len(s.groups[ev]) > 0 }

// For returns the hooks of ev whose matcher matches one of names (a
// tool's names, a source); with no names, as for the events that have
// no matcher (Stop, UserPromptSubmit), all of them. A command named
// twice runs once.
func (s *Set) For(ev string, names ...string) []Hook {
	if s == nil {
		return nil
	}
	var out []Hook
	for _, g := range s.groups[ev] {
		if len(names) > 0 && !g.match(names) {
			continue
		}
		for _, h := range g.hooks {
			if !slices.ContainsFunc(out, func(o Hook) bool { return o.Command == h.Command }) {
				out = append(out, h)
			}
		}
	}
	return out
}
