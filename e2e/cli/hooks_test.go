package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/llm/llmtest"
)

// Hooks in Claude Code's protocol (docs/PROTOCOL.md#hooks): the hook
// files and scripts of Claude Code's documentation run unchanged.

// Claude Code's documented examples, unchanged: a PreToolUse hook on Bash
// that blocks rm -rf with exit 2 (its jq script), a PostToolUse formatter
// on Write|Edit, and a Stop hook that makes the agent go on once (it
// checks stop_hook_active).
func TestHooksClaudeExamples(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		e2etest.BashTurn("rm -rf build"),
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("write_file", `{"path":"notes.md","content":"one   \ntwo\t\n"}`)}},
		llmtest.Turn{Text: "All done."},
		llmtest.Turn{Text: "Tests pass; done."},
	)
	if err := os.MkdirAll(filepath.Join(e.Workspace, "build"), 0o755); err != nil {
		t.Fatal(err)
	}
	settings := e.WriteHooks(t, `{
  "hooks": {
    "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "$DIR/block-rm.sh"}]}],
    "PostToolUse": [{"matcher": "Write|Edit", "hooks": [{"type": "command", "command": "jq -r '.tool_input.file_path' | { read file_path; sed -i 's/[[:space:]]*$//' \"$file_path\"; }"}]}],
    "Stop": [{"hooks": [{"type": "command", "command": "$DIR/check-tests.sh", "timeout": 30}]}]
  }
}`, map[string]string{
		"block-rm.sh": `#!/bin/bash
COMMAND=$(jq -r '.tool_input.command')

if echo "$COMMAND" | grep -q 'rm -rf'; then
  echo "Blocked: rm -rf is not allowed" >&2
  exit 2
fi
exit 0
`,
		"check-tests.sh": `#!/bin/bash
INPUT=$(cat)
if [ "$(echo "$INPUT" | jq -r '.stop_hook_active')" = "true" ]; then
  exit 0  # allow Claude to stop
fi
echo "Run the tests before you stop." >&2
exit 2
`,
	})
	res := e.Run("run", "--json", "--settings", settings, "tidy up")
	if res.Code != 0 {
		t.Fatalf("exit %d; stderr %s", res.Code, res.Stderr)
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "build")); err != nil {
		t.Error("rm -rf ran: build is gone")
	}
	if got, _ := os.ReadFile(filepath.Join(e.Workspace, "notes.md")); string(got) != "one\ntwo\n" {
		t.Errorf("notes.md = %q: the PostToolUse formatter did not run", got)
	}
	reqs := e.Srv.Requests()
	if got := reqs[1].LastMessage().Content; !strings.Contains(got, "Blocked: rm -rf is not allowed") {
		t.Errorf("the model was told %q about its rm -rf", got)
	}
	if got := reqs[3].LastMessage().Content; got != "Run the tests before you stop." {
		t.Errorf("after its first answer the model was sent %q, not the Stop hook's word", got)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	var got []string
	for _, r := range e2etest.HookRecords(t, evs) {
		got = append(got, r.Event+":"+r.Decision)
	}
	if want := "PreToolUse:deny PostToolUse: Stop:block Stop:"; strings.Join(got, " ") != want {
		t.Errorf("hook.completed %v, want %s", got, want)
	}
	var fin event.RunFinishedData
	if err := evs[len(evs)-1].Decode(&fin); err != nil || fin.Result != "Tests pass; done." {
		t.Errorf("final %+v", fin)
	}
}

// permissionDecision deny, allow (an --ask rule is skipped) and
// updatedInput (what runs, and what tool.started records, is the hook's).
func TestHookPermissionDecisions(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		e2etest.BashTurn("touch denied"),
		e2etest.BashTurn("touch allowed"),
		e2etest.BashTurn("touch original"),
		llmtest.Turn{Text: "done"},
	)
	settings := e.WriteHooks(t, `{"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "$DIR/decide.sh"}]}]}}`,
		map[string]string{"decide.sh": `#!/bin/sh
INPUT=$(cat)
case "$(echo "$INPUT" | jq -r .tool_input.command)" in
  *denied) jq -n '{hookSpecificOutput: {hookEventName: "PreToolUse", permissionDecision: "deny", permissionDecisionReason: "not that one"}}' ;;
  *allowed) echo '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}}' ;;
  *original) echo "$INPUT" | jq -c '{hookSpecificOutput: {hookEventName: "PreToolUse", permissionDecision: "allow", updatedInput: (.tool_input + {command: "touch updated"})}}' ;;
esac
`})
	res := e.Run("run", "--json", "--ask", "bash", "--settings", settings, "touch things")
	if res.Code != 0 {
		t.Fatalf("exit %d; stderr %s", res.Code, res.Stderr)
	}
	for file, want := range map[string]bool{"denied": false, "allowed": true, "original": false, "updated": true} {
		if _, err := os.Stat(filepath.Join(e.Workspace, file)); (err == nil) != want {
			t.Errorf("%s exists = %v, want %v", file, err == nil, want)
		}
	}
	if got := e.Srv.Requests()[1].LastMessage().Content; !strings.Contains(got, "denied (PreToolUse hook): not that one") {
		t.Errorf("the model was told %q", got)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	if n := len(e2etest.OfType(evs, event.RunWaiting)); n != 0 {
		t.Errorf("%d waits: allow should skip --ask", n)
	}
	var started []string
	for _, ev := range e2etest.OfType(evs, event.ToolStarted) {
		var d event.ToolStartedData
		_ = ev.Decode(&d)
		started = append(started, string(d.Args))
	}
	if len(started) != 2 || !strings.Contains(started[1], "touch updated") {
		t.Errorf("tool.started args %v: the journal must say what ran", started)
	}
}

// ask is a §16 approval: the run parks (exit 6), and once approved the
// resumed run runs the call once, without running the hook again. The
// Notification hook is told the run waits.
func TestHookAskParksUntilApproved(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, e2etest.BashTurn("echo pushed >> pushes"), llmtest.Turn{Text: "pushed"})
	settings := e.WriteHooks(t, `{"hooks": {
  "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "echo x >> $DIR/pre-runs; echo '{\"hookSpecificOutput\": {\"permissionDecision\": \"ask\", \"permissionDecisionReason\": \"pushes need a person\"}}'"}]}],
  "Notification": [{"matcher": "permission_prompt", "hooks": [{"type": "command", "command": "jq -r .message >> $DIR/told"}]}]
}}`, nil)
	dir := filepath.Dir(settings)
	res := e.Run("run", "--json", "--settings", settings, "push")
	if res.Code != 6 {
		t.Fatalf("exit %d, want 6 (waiting); stderr %s", res.Code, res.Stderr)
	}
	runID := e2etest.DecodeRunID(t, res.Stdout)
	if !strings.Contains(res.Stderr, "rule PreToolUse hook: pushes need a person") || !strings.Contains(res.Stderr, "agent approve "+runID) {
		t.Errorf("stderr does not say why the run waits and how to answer: %s", res.Stderr)
	}
	if told, _ := os.ReadFile(filepath.Join(dir, "told")); string(told) != "agent needs your permission to use Bash\n" {
		t.Errorf("the Notification hook was told %q", told)
	}
	if res := e.Run("approve", runID); res.Code != 0 {
		t.Fatalf("approve: exit %d %s", res.Code, res.Stderr)
	}
	res = e.Run("resume", runID, "--json")
	if res.Code != 0 {
		t.Fatalf("resume: exit %d %s", res.Code, res.Stderr)
	}
	if pushes, _ := os.ReadFile(filepath.Join(e.Workspace, "pushes")); string(pushes) != "pushed\n" {
		t.Errorf("pushes = %q, want the call run once", pushes)
	}
	if runs, _ := os.ReadFile(filepath.Join(dir, "pre-runs")); string(runs) != "x\n" {
		t.Errorf("the PreToolUse hook ran %d times, want once", strings.Count(string(runs), "x"))
	}
	if told, _ := os.ReadFile(filepath.Join(dir, "told")); strings.Count(string(told), "\n") != 1 {
		t.Errorf("the Notification hook ran again on resume: %q", told)
	}
}

// A hook that sleeps past its timeout is killed and one that crashes is
// a warning: the run goes on, and says so.
func TestHookTimeoutAndCrashOnlyWarn(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, e2etest.BashTurn("touch ran"), llmtest.Turn{Text: "done"})
	settings := e.WriteHooks(t, `{"hooks": {"PreToolUse": [{"hooks": [
  {"type": "command", "command": "sleep 600", "timeout": 1},
  {"type": "command", "command": "kill -SEGV $$"}]}]}}`, nil)
	res := e.Run("run", "--settings", settings, "touch it")
	if res.Code != 0 {
		t.Fatalf("exit %d; stderr %s", res.Code, res.Stderr)
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "ran")); err != nil {
		t.Error("the call did not run")
	}
	for _, want := range []string{`warning: PreToolUse hook "sleep 600" timed out after 1s; its process group was killed; the run goes on`,
		`warning: PreToolUse hook "kill -SEGV $$" killed by signal: segmentation fault; the run goes on`} {
		if !strings.Contains(res.Stderr, want) {
			t.Errorf("stderr does not say %q:\n%s", want, res.Stderr)
		}
	}
}

// A settings file that cannot work is bad input: exit 2, one line naming
// the file and what is wrong, and no run. So are bad [hooks] in
// config.toml.
func TestHookBadSettings(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t)
	bad := e.WriteHooks(t, `{"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command"}]}]}}`, nil)
	res := e.Run("run", "--settings", bad, "hi")
	want := "--settings " + bad + `: "hooks".PreToolUse[0].hooks[0].command is empty`
	if res.Code != 2 || !strings.Contains(res.Stderr, want) || strings.Count(strings.TrimSpace(res.Stderr), "\n") != 0 {
		t.Errorf("exit %d, stderr %q; want 2 and one line with %q", res.Code, res.Stderr, want)
	}
	if res := e.Run("run", "--settings", filepath.Join(e.Workspace, "nope.json"), "hi"); res.Code != 2 || !strings.Contains(res.Stderr, "nope.json: no such file") {
		t.Errorf("a missing file: exit %d %q", res.Code, res.Stderr)
	}
	if err := os.MkdirAll(e.Home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.Home, "config.toml"), []byte("[[hooks.PreToolUse]]\nmatcher = \"(\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if res := e.Run("run", "hi"); res.Code != 2 || !strings.Contains(res.Stderr, `config.toml: hooks.PreToolUse[0].matcher "(" is no regular expression`) {
		t.Errorf("bad [hooks] in config.toml: exit %d %q", res.Code, res.Stderr)
	}
	if n := e.Srv.RequestCount(); n != 0 {
		t.Errorf("%d model requests", n)
	}
	if res := e.Run("runs", "list", "--json"); strings.TrimSpace(res.Stdout) != "" {
		t.Errorf("a run was recorded: %s", res.Stdout)
	}
}

// config.toml's [hooks], in the same shape, run for every run; a
// UserPromptSubmit hook that exits 2 refuses the prompt (exit 1, reason
// hook), and SessionStart's output is context for the model.
func TestHooksFromConfig(t *testing.T) {
	t.Parallel()
	e2etest.NeedJQ(t)
	e := e2etest.New(t, llmtest.Turn{Text: "hello"})
	if err := os.MkdirAll(e.Home, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := `[[hooks.SessionStart]]
matcher = "startup"
hooks = [{ type = "command", command = "echo 'Team rule: answer in English.'" }]

[[hooks.UserPromptSubmit]]
[[hooks.UserPromptSubmit.hooks]]
type = "command"
command = "if jq -r .prompt | grep -qi password; then echo 'prompts must not hold secrets' >&2; exit 2; fi"
`
	if err := os.WriteFile(filepath.Join(e.Home, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	res := e.Run("run", "--json", "say hello")
	if res.Code != 0 {
		t.Fatalf("exit %d; stderr %s", res.Code, res.Stderr)
	}
	var first struct {
		Messages []struct{ Role, Content string } `json:"messages"`
	}
	if err := json.Unmarshal(e.Srv.Requests()[0].Body, &first); err != nil || first.Messages[1].Content != "say hello\n\nTeam rule: answer in English." {
		t.Errorf("first request's prompt: %+v %v", first.Messages, err)
	}
	res = e.Run("run", "--json", "my password is hunter2")
	evs := e2etest.DecodeEvents(t, res.Stdout)
	var fin event.RunFinishedData
	if err := evs[len(evs)-1].Decode(&fin); err != nil || res.Code != 1 || fin.Reason != event.ReasonHook ||
		!strings.Contains(fin.Detail, "a UserPromptSubmit hook refused the prompt: prompts must not hold secrets") {
		t.Errorf("exit %d, end %+v", res.Code, fin)
	}
	if n := e.Srv.RequestCount(); n != 1 {
		t.Errorf("%d model requests, want the refused prompt never sent", n)
	}
}
