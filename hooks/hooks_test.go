package hooks_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"agent/config"
	"agent/hooks"
)

func writeSettings(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "settings.json")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func commands(hs []hooks.Hook) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.Command)
	}
	return out
}

// A matcher matches agent's tool names and Claude Code's, as Claude
// reads a matcher: names exactly, a regular expression anywhere, empty or
// "*" everything.
func TestMatchers(t *testing.T) {
	t.Parallel()
	path := writeSettings(t, `{"model": "ignored", "permissions": {"allow": []}, "hooks": {"PreToolUse": [
		{"matcher": "Bash", "hooks": [{"type": "command", "command": "bash-hook"}]},
		{"matcher": "Edit|Write", "hooks": [{"type": "command", "command": "edit-hook", "timeout": 5}]},
		{"matcher": "mcp__github__.*", "hooks": [{"type": "command", "command": "github-hook"}]},
		{"matcher": "read_file", "hooks": [{"type": "command", "command": "read-hook"}]},
		{"matcher": "*", "hooks": [{"type": "command", "command": "all-hook"}]},
		{"hooks": [{"type": "command", "command": "all-hook"}]}
	]}}`)
	set, err := hooks.Load(nil, "config.toml", path)
	if err != nil {
		t.Fatal(err)
	}
	for tool, want := range map[string]string{
		"bash":                   "bash-hook all-hook",
		"write_file":             "edit-hook all-hook",
		"edit_file":              "edit-hook all-hook",
		"read_file":              "read-hook all-hook",
		"list_files":             "all-hook",
		"mcp__github__get_issue": "github-hook all-hook",
		"mcp__docs__search":      "all-hook",
		"send_email":             "all-hook",
	} {
		if got := strings.Join(commands(set.For(hooks.PreToolUse, hooks.Names(tool)...)), " "); got != want {
			t.Errorf("%s matches %q, want %q", tool, got, want)
		}
	}
	if hs := set.For(hooks.PreToolUse, hooks.Names("write_file")...); hs[0].Timeout != 5*time.Second || hs[1].Timeout != hooks.DefaultTimeout {
		t.Errorf("timeouts %v, %v; want 5s and the default", hs[0].Timeout, hs[1].Timeout)
	}
	if set.Has(hooks.Stop) || set.For(hooks.PostToolUse, "bash") != nil {
		t.Error("events with no hooks have some")
	}
}

// config.toml's [hooks] and the settings file's both run.
func TestConfigAndSettingsBothRun(t *testing.T) {
	t.Parallel()
	path := writeSettings(t, `{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "from-settings"}]}]}}`)
	fromConfig := map[string][]config.HookMatcher{"Stop": {{Matcher: "ignored for Stop", Hooks: []config.Hook{{Type: "command", Command: "from-config"}}}}}
	set, err := hooks.Load(fromConfig, "config.toml", path)
	if err != nil {
		t.Fatal(err)
	}
	if got := commands(set.For(hooks.Stop)); strings.Join(got, " ") != "from-config from-settings" {
		t.Errorf("Stop hooks %v", got)
	}
}

// A settings file that cannot work is refused naming the file and what
// is wrong; Claude Code's events agent does not fire are said, not
// refused.
func TestBadSettings(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ body, want string }{
		{`{"hooks": `, "not a settings.json: unexpected end of JSON input"},
		{`{"hooks": {"PreToolUse": {"matcher": "Bash"}}}`, `"hooks".PreToolUse must be a list, not object`},
		{`{"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "x", "timeout": "60"}]}]}}`, `"hooks".PreToolUse[…].hooks.timeout must be a number, not string`},
		{`{"hooks": {"BeforeTool": []}}`, `"hooks".BeforeTool is no hook event; the events are SessionStart, `},
		{`{"hooks": {"PreToolUse": [{"matcher": "Bash(", "hooks": []}]}}`, `"hooks".PreToolUse[0].matcher "Bash(" is no regular expression`},
		{`{"hooks": {"Stop": [{"hooks": [{"type": "prompt", "prompt": "is it done?"}]}]}}`, `"hooks".Stop[0].hooks[0].type is "prompt": only "command" hooks run`},
		{`{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": " "}]}]}}`, `"hooks".Stop[0].hooks[0].command is empty`},
		{`{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "x", "timeout": -1}]}]}}`, `timeout must be a positive number of seconds`},
	} {
		path := writeSettings(t, c.body)
		_, err := hooks.Load(nil, "config.toml", path)
		if err == nil || !strings.HasPrefix(err.Error(), path+": ") || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error %v; want one line naming the file and %q", c.body, err, c.want)
		}
	}
	if _, err := hooks.Load(nil, "config.toml", filepath.Join(t.TempDir(), "missing.json")); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("a missing file: %v", err)
	}
	set, err := hooks.Load(nil, "config.toml", writeSettings(t, `{"hooks": {"SessionEnd": [{"hooks": [{"type": "command", "command": "x"}]}]}}`))
	if err != nil || len(set.Ignored) != 1 || !strings.Contains(set.Ignored[0], "SessionEnd hooks do not run") {
		t.Errorf("SessionEnd: %v %v", set, err)
	}
}

// Arguments reach a hook by Claude's field names, and a hook's
// updatedInput comes back by agent's.
func TestClaudeInput(t *testing.T) {
	t.Parallel()
	root := "/ws"
	for _, c := range []struct{ tool, args, claude, back string }{
		{"write_file", `{"path":"a/b.go","content":"x"}`, `{"content":"x","file_path":"/ws/a/b.go"}`, `{"content":"x","path":"a/b.go"}`},
		{"edit_file", `{"path":"a.go","old_string":"x","new_string":"y"}`, `{"file_path":"/ws/a.go","new_string":"y","old_string":"x"}`, `{"new_string":"y","old_string":"x","path":"a.go"}`},
		{"read_file", `{"path":"/etc/passwd"}`, `{"file_path":"/etc/passwd"}`, `{"path":"/etc/passwd"}`},
		{"bash", `{"command":"ls","timeout_s":2}`, `{"command":"ls","timeout":2000}`, `{"command":"ls","timeout_s":2}`},
		{"grep", `{"pattern":"x"}`, `{"pattern":"x"}`, `{"pattern":"x"}`},
		{"bash", `not json`, `not json`, `not json`},
	} {
		got := hooks.ClaudeInput(c.tool, json.RawMessage(c.args), root)
		if string(got) != c.claude {
			t.Errorf("%s %s → %s, want %s", c.tool, c.args, got, c.claude)
		}
		if back := hooks.AgentInput(c.tool, got, root); string(back) != c.back {
			t.Errorf("%s %s back → %s, want %s", c.tool, got, back, c.back)
		}
	}
	if hooks.ClaudeName("bash") != "Bash" || hooks.ClaudeName("list_files") != "Glob" || hooks.ClaudeName("mcp__a__b") != "mcp__a__b" {
		t.Error("Claude's names")
	}
}

// run runs one hook command for ev with in on its stdin.
func run(t *testing.T, ev, command string, timeout time.Duration, in hooks.Input) hooks.Result {
	t.Helper()
	if _, err := exec.LookPath("jq"); err != nil {
		t.Skip("jq is missing: these hooks read their input with it, as Claude Code's documented ones do; scripts/deps.sh installs it")
	}
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	in.HookEventName = ev
	return hooks.Run(context.Background(), []hooks.Hook{{Event: ev, Command: command, Timeout: timeout}}, in, hooks.Env{Dir: t.TempDir()})[0]
}

// A hook gets Claude's JSON on stdin, runs in the workspace with
// CLAUDE_PROJECT_DIR, and its exit code and stdout decide as in Claude
// Code.
func TestVerdicts(t *testing.T) {
	t.Parallel()
	in := hooks.Input{SessionID: "s1", ToolName: "Bash", ToolInput: json.RawMessage(`{"command":"rm -rf /"}`), RunID: "r1"}
	for _, c := range []struct {
		ev, command string
		want        hooks.Verdict
	}{
		{hooks.PreToolUse, `cmd=$(jq -r .tool_input.command); case "$cmd" in rm*) echo "no rm: $cmd" >&2; exit 2;; esac`,
			hooks.Verdict{Decision: hooks.Deny, Reason: "no rm: rm -rf /"}},
		{hooks.PreToolUse, `echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"ask","permissionDecisionReason":"risky"}}'`,
			hooks.Verdict{Decision: hooks.Ask, Reason: "risky"}},
		{hooks.PreToolUse, `echo '{"decision":"approve","reason":"fine"}'`, hooks.Verdict{Decision: hooks.Allow, Reason: "fine"}},
		{hooks.PreToolUse, `echo '{"hookSpecificOutput":{"permissionDecision":"allow","updatedInput":{"command":"ls"}}}'`,
			hooks.Verdict{Decision: hooks.Allow, UpdatedInput: json.RawMessage(`{"command":"ls"}`)}},
		{hooks.PostToolUse, `echo '{"decision":"block","reason":"lint failed"}'`, hooks.Verdict{Decision: hooks.Block, Reason: "lint failed"}},
		{hooks.PostToolUse, `echo '{"hookSpecificOutput":{"additionalContext":"formatted"}}'`, hooks.Verdict{Context: "formatted"}},
		{hooks.Stop, `echo '{"continue":false,"stopReason":"enough"}'`, hooks.Verdict{Decision: hooks.Halt, Reason: "enough"}},
		{hooks.SessionStart, `echo "branch: main"`, hooks.Verdict{Context: "branch: main"}},
		{hooks.UserPromptSubmit, `jq -r .session_id`, hooks.Verdict{Context: "s1"}},
		{hooks.PostToolUse, `echo plain text is not for the model`, hooks.Verdict{}},
		{hooks.Notification, `echo cannot block >&2; exit 2`, hooks.Verdict{Warning: `Notification hook "echo cannot block >&2; exit 2" exited 2 (cannot block); it cannot block this event`}},
		{hooks.PreToolUse, `echo oops >&2; exit 1`, hooks.Verdict{Warning: `PreToolUse hook "echo oops >&2; exit 1" exited 1: oops; the run goes on`}},
		{hooks.PreToolUse, `test "$PWD" = "$CLAUDE_PROJECT_DIR" && jq -e '.run_id == "r1" and .hook_event_name == "PreToolUse"' >/dev/null || exit 2`, hooks.Verdict{}},
	} {
		r := run(t, c.ev, c.command, 0, in)
		got := r.Verdict()
		if got.Decision != c.want.Decision || got.Reason != c.want.Reason || got.Context != c.want.Context ||
			string(got.UpdatedInput) != string(c.want.UpdatedInput) || got.Warning != c.want.Warning {
			t.Errorf("%s %q: verdict %+v (stderr %q), want %+v", c.ev, c.command, got, r.Stderr, c.want)
		}
	}
}

// A hook that outlives its timeout is killed with what it started, and
// only warns; so does one that cannot run.
func TestTimeoutKillsTheGroup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	began := time.Now()
	r := hooks.Run(context.Background(), []hooks.Hook{{Event: hooks.PreToolUse, Command: "sleep 30 & echo $! > " + pidFile + "; wait", Timeout: 300 * time.Millisecond}},
		hooks.Input{}, hooks.Env{Dir: dir})[0]
	if !r.TimedOut || r.ExitCode != -1 || time.Since(began) > 10*time.Second {
		t.Fatalf("result %+v after %s", r, time.Since(began))
	}
	if v := r.Verdict(); v.Decision != "" || !strings.Contains(v.Warning, "timed out after 300ms; its process group was killed; the run goes on") {
		t.Errorf("verdict %+v", v)
	}
	pid, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat("/proc/" + strings.TrimSpace(string(pid))); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the hook's child outlived it")
		}
		time.Sleep(20 * time.Millisecond)
	}
	crash := run(t, hooks.PreToolUse, "kill -SEGV $$", 0, hooks.Input{})
	if v := crash.Verdict(); v.Decision != "" || !strings.Contains(v.Warning, "killed by signal") {
		t.Errorf("a crashing hook: %+v %+v", crash, v)
	}
}

// Hooks of one event run at once: two hooks that each take a while take
// about as long as one.
func TestHooksRunAtOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// Each waits for the other's file: in turn, they would both time out.
	hs := []hooks.Hook{
		{Event: hooks.Stop, Command: "touch a; while [ ! -e b ]; do sleep 0.01; done", Timeout: 20 * time.Second},
		{Event: hooks.Stop, Command: "touch b; while [ ! -e a ]; do sleep 0.01; done", Timeout: 20 * time.Second},
	}
	for i, r := range hooks.Run(context.Background(), hs, hooks.Input{}, hooks.Env{Dir: dir}) {
		if r.ExitCode != 0 || r.Hook.Command != hs[i].Command {
			t.Errorf("hook %d: %+v", i, r)
		}
	}
}
