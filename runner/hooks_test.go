package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"agent/adapter"
	"agent/approval"
	"agent/event"
	"agent/hooks"
	"agent/llm"
	"agent/runner"
	"agent/tools"
)

// hookSet reads hooks from a settings.json body.
func hookSet(t testing.TB, settings string) *hooks.Set {
	t.Helper()
	if _, err := exec.LookPath("jq"); err != nil {
		t.Skip("jq is missing: these hooks read their input with it, as Claude Code's documented ones do; scripts/deps.sh installs it")
	}
	path := filepath.Join(t.TempDir(), "settings.json")
	if err := os.WriteFile(path, []byte(settings), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := hooks.Load(nil, "config.toml", path)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// oneHook is settings.json with one command hook for ev and matcher.
func oneHook(ev, matcher, command string) string {
	b, _ := json.Marshal(map[string]any{"hooks": map[string]any{ev: []any{map[string]any{
		"matcher": matcher, "hooks": []any{map[string]any{"type": "command", "command": command}}}}}})
	return string(b)
}

// hooked is a loop's config with the settings' hooks over a fresh
// workspace.
func hooked(t testing.TB, model llm.Model, set *tools.Set, root string, sink runner.Sink, settings string) runner.Config {
	return runner.Config{Model: model, Tools: set, Sink: sink, Hooks: hookSet(t, settings), HookEnv: hooks.Env{Dir: root}, RunID: "run-1"}
}

func hookRecordsOf(t *testing.T, s *recSink) []event.HookCompletedData {
	t.Helper()
	var out []event.HookCompletedData
	for _, e := range s.Of(event.HookCompleted) {
		out = append(out, decode[event.HookCompletedData](t, e))
	}
	return out
}

// lastUser is the last user or tool message the model was sent.
func lastSent(m *fakeModel) llm.Message {
	reqs := m.Requests()
	msgs := reqs[len(reqs)-1].Messages
	return msgs[len(msgs)-1]
}

// Claude Code's documented PreToolUse example: a Bash hook that blocks
// rm -rf with exit 2. The call never starts; the model is told why.
func TestHookPreToolUseBlocks(t *testing.T) {
	t.Parallel()
	set, root := newTools(t)
	model := replies(t, calls(tc("c1", "bash", bashArgs("rm -rf build && touch ran"))), final("ok, I will not"))
	sink := &recSink{}
	cfg := hooked(t, model, set, root, sink, oneHook("PreToolUse", "Bash",
		`command=$(jq -r '.tool_input.command'); if echo "$command" | grep -q 'rm -rf'; then echo "Blocked: rm -rf is not allowed" >&2; exit 2; fi`))
	res, err := runner.Run(context.Background(), cfg, "clean up", runner.State{})
	if err != nil || res.Status != event.StatusCompleted {
		t.Fatal(res, err)
	}
	if fileExists(filepath.Join(root, "ran")) || len(sink.Of(event.ToolStarted)) != 0 {
		t.Fatal("the blocked call ran")
	}
	if got := lastSent(model).Content; !strings.Contains(got, "denied (PreToolUse hook): Blocked: rm -rf is not allowed") {
		t.Errorf("the model was told %q", got)
	}
	recs := hookRecordsOf(t, sink)
	if len(recs) != 1 || recs[0].Event != "PreToolUse" || recs[0].ExitCode != 2 || recs[0].Decision != "deny" || recs[0].CallID != "c1" || recs[0].Tool != "bash" {
		t.Errorf("hook.completed = %+v", recs)
	}
	types := sink.Types()
	if i, j := indexOf(types, event.HookCompleted), indexOf(types, event.ToolCompleted); i < 0 || i > j {
		t.Errorf("hook.completed is not recorded before the call's result: %v", types)
	}
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

// permissionDecision allow skips an --ask approval; ask makes one where
// no rule would; updatedInput changes what runs, and what tool.started
// records.
func TestHookPermissionDecisions(t *testing.T) {
	t.Parallel()
	decide := func(decision string, updated string) string {
		out := `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"` + decision + `","permissionDecisionReason":"hook says ` + decision + `"`
		if updated != "" {
			out += `,"updatedInput":` + updated
		}
		return "echo '" + out + "}}'"
	}
	t.Run("allow skips the rule", func(t *testing.T) {
		t.Parallel()
		set, root := newTools(t)
		model := replies(t, calls(tc("c1", "bash", bashArgs("touch ran"))), final("done"))
		sink := &recSink{}
		cfg := hooked(t, model, set, root, sink, oneHook("PreToolUse", "Bash", decide("allow", "")))
		cfg.Approvals, _ = approval.Parse([]string{"bash"})
		if res, err := runner.Run(context.Background(), cfg, "go", runner.State{}); err != nil || res.Status != event.StatusCompleted {
			t.Fatal(res, err)
		}
		if !fileExists(filepath.Join(root, "ran")) || len(sink.Of(event.RunWaiting)) != 0 {
			t.Error("an allowed call waited or did not run")
		}
	})
	t.Run("ask waits where no rule does", func(t *testing.T) {
		t.Parallel()
		set, root := newTools(t)
		model := replies(t, calls(tc("c1", "bash", bashArgs("touch ran"))))
		sink := &recSink{}
		cfg := hooked(t, model, set, root, sink, oneHook("PreToolUse", "Bash", decide("ask", "")))
		_, err := runner.Run(context.Background(), cfg, "go", runner.State{})
		if !errors.Is(err, runner.ErrParked) {
			t.Fatalf("err %v, want parked", err)
		}
		w := decode[event.RunWaitingData](t, sink.Of(event.RunWaiting)[0])
		if w.Kind != event.WaitApproval || w.Rule != "PreToolUse hook: hook says ask" || w.Tool != "bash" || fileExists(filepath.Join(root, "ran")) {
			t.Errorf("run.waiting = %+v", w)
		}
	})
	t.Run("deny", func(t *testing.T) {
		t.Parallel()
		set, root := newTools(t)
		model := replies(t, calls(tc("c1", "bash", bashArgs("touch ran"))), final("fine"))
		sink := &recSink{}
		cfg := hooked(t, model, set, root, sink, oneHook("PreToolUse", "*", decide("deny", "")))
		if _, err := runner.Run(context.Background(), cfg, "go", runner.State{}); err != nil {
			t.Fatal(err)
		}
		if fileExists(filepath.Join(root, "ran")) || !strings.Contains(lastSent(model).Content, "hook says deny") {
			t.Errorf("denied call: ran=%v, model told %q", fileExists(filepath.Join(root, "ran")), lastSent(model).Content)
		}
	})
	t.Run("updatedInput", func(t *testing.T) {
		t.Parallel()
		set, root := newTools(t)
		model := replies(t, calls(tc("c1", "write_file", `{"path":"a.txt","content":"from the model"}`)), final("written"))
		sink := &recSink{}
		cfg := hooked(t, model, set, root, sink, oneHook("PreToolUse", "Write",
			`jq -c '{hookSpecificOutput: {hookEventName: "PreToolUse", permissionDecision: "allow", updatedInput: (.tool_input + {content: "from the hook"})}}'`))
		if _, err := runner.Run(context.Background(), cfg, "go", runner.State{}); err != nil {
			t.Fatal(err)
		}
		if got := readFile(t, filepath.Join(root, "a.txt")); got != "from the hook" {
			t.Errorf("a.txt = %q", got)
		}
		started := decode[event.ToolStartedData](t, sink.Of(event.ToolStarted)[0])
		if !strings.Contains(string(started.Args), "from the hook") || !strings.Contains(string(started.Args), `"path":"a.txt"`) {
			t.Errorf("tool.started args %s: not what ran", started.Args)
		}
	})
}

// A resumed loop acts on the decisions the journal records: a call whose
// PreToolUse hook asked and was then approved runs without the hook
// running again, with the arguments the hook gave.
func TestHookDecisionNotAskedAgain(t *testing.T) {
	t.Parallel()
	set, root := newTools(t)
	settings := oneHook("PreToolUse", "Bash", `echo x >> "$CLAUDE_PROJECT_DIR/../hook-runs";`+
		` jq -c '{hookSpecificOutput: {permissionDecision: "ask", updatedInput: {command: "touch updated"}}}'`)
	model := replies(t, calls(tc("c1", "bash", bashArgs("touch original"))))
	sink := &recSink{}
	cfg := hooked(t, model, set, root, sink, settings)
	if _, err := runner.Run(context.Background(), cfg, "go", runner.State{}); !errors.Is(err, runner.ErrParked) {
		t.Fatalf("err %v, want parked", err)
	}
	w := decode[event.RunWaitingData](t, sink.Of(event.RunWaiting)[0])
	if !strings.Contains(string(w.Args), "touch updated") {
		t.Errorf("the approval asks for %s, not what will run", w.Args)
	}

	// Resumed, approved: as the store would give the state back.
	model2 := replies(t, final("done"))
	sink2 := &recSink{}
	cfg2 := hooked(t, model2, set, root, sink2, settings)
	cfg2.Hooked = hookRecordsOf(t, sink)
	cfg2.Waits = map[string]adapter.Wait{w.WaitID: {Waiting: w, Resolution: &event.WaitResolvedData{WaitID: w.WaitID, Outcome: event.WaitAllowed, Via: event.ViaCLI}}}
	state := runner.State{Turns: 1, History: []llm.Message{{Role: llm.RoleUser, Content: "go"},
		{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{tc("c1", "bash", bashArgs("touch original"))}}}}
	if res, err := runner.Run(context.Background(), cfg2, "go", state); err != nil || res.Status != event.StatusCompleted {
		t.Fatal(res, err)
	}
	if runs := readFile(t, filepath.Join(root, "..", "hook-runs")); runs != "x\n" {
		t.Errorf("the hook ran %d times, want once", strings.Count(runs, "x"))
	}
	if len(sink2.Of(event.HookCompleted)) != 0 {
		t.Error("the resumed loop recorded the hook again")
	}
	if !fileExists(filepath.Join(root, "updated")) || fileExists(filepath.Join(root, "original")) {
		t.Error("the resumed call did not run as the hook changed it")
	}
}

// Claude Code's PostToolUse formatter: a hook on Write|Edit rewrites the
// file the tool wrote; one that blocks tells the model why, after the
// turn's results.
func TestHookPostToolUse(t *testing.T) {
	t.Parallel()
	set, root := newTools(t)
	model := replies(t, calls(tc("c1", "write_file", `{"path":"a.go","content":"package   a"}`)), final("done"))
	sink := &recSink{}
	settings := `{"hooks": {"PostToolUse": [{"matcher": "Write|Edit", "hooks": [
		{"type": "command", "command": "f=$(jq -r .tool_input.file_path); tr -s ' ' < \"$f\" > \"$f.tmp\" && mv \"$f.tmp\" \"$f\""},
		{"type": "command", "command": "jq -r '.tool_response.filePath' >> \"$CLAUDE_PROJECT_DIR/../seen\"; echo '{\"decision\": \"block\", \"reason\": \"run go vet\"}'"}]}]}}`
	cfg := hooked(t, model, set, root, sink, settings)
	if _, err := runner.Run(context.Background(), cfg, "write it", runner.State{}); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(root, "a.go")); got != "package a" {
		t.Errorf("a.go = %q, not formatted", got)
	}
	if got := readFile(t, filepath.Join(root, "..", "seen")); got != filepath.Join(root, "a.go")+"\n" {
		t.Errorf("tool_response.filePath = %q", got)
	}
	if got := lastSent(model); got.Role != llm.RoleUser || !strings.Contains(got.Content, "PostToolUse hook on Write (c1): run go vet") {
		t.Errorf("the model was sent %+v", got)
	}
}

// Claude Code's Stop hook that continues once: it blocks unless
// stop_hook_active says a Stop hook already made the loop go on.
func TestHookStopContinuesOnce(t *testing.T) {
	t.Parallel()
	set, root := newTools(t)
	model := replies(t, final("done?"), final("really done"))
	sink := &recSink{}
	cfg := hooked(t, model, set, root, sink, oneHook("Stop", "",
		`if [ "$(jq -r .stop_hook_active)" = "true" ]; then exit 0; fi; echo "run the tests first" >&2; exit 2`))
	res, err := runner.Run(context.Background(), cfg, "work", runner.State{})
	if err != nil || res.Status != event.StatusCompleted || res.Text != "really done" {
		t.Fatal(res, err)
	}
	if got := model.Requests()[1].Messages; got[len(got)-1].Content != "run the tests first" {
		t.Errorf("the second request ends with %+v", got[len(got)-1])
	}
	if recs := hookRecordsOf(t, sink); len(recs) != 2 || recs[0].Decision != "block" || recs[1].Decision != "" {
		t.Errorf("hook.completed = %+v", recs)
	}
	// A Stop hook that always blocks is bounded by the turn limit.
	model = forever(func(int) llm.Response { return final("done") })
	cfg = hooked(t, model, set, root, &recSink{}, oneHook("Stop", "", `echo more >&2; exit 2`))
	cfg.MaxTurns = 3
	if res, err := runner.Run(context.Background(), cfg, "work", runner.State{}); err != nil || res.Reason != event.ReasonMaxTurns || len(model.Requests()) != 3 {
		t.Errorf("result %+v after %d requests, err %v; want max_turns after 3", res, len(model.Requests()), err)
	}
}

// SessionStart's and UserPromptSubmit's output is context with the
// prompt; a UserPromptSubmit hook that exits 2 refuses it.
func TestHookPromptHooks(t *testing.T) {
	t.Parallel()
	set, root := newTools(t)
	model := replies(t, final("hi"))
	settings := `{"hooks": {
		"SessionStart": [{"matcher": "startup", "hooks": [{"type": "command", "command": "echo on branch main"}]}],
		"UserPromptSubmit": [{"hooks": [{"type": "command", "command": "jq -r '\"you said: \" + .prompt'"}]}]}}`
	if _, err := runner.Run(context.Background(), hooked(t, model, set, root, &recSink{}, settings), "hello", runner.State{}); err != nil {
		t.Fatal(err)
	}
	if got := model.Requests()[0].Messages[1].Content; got != "hello\n\non branch main\n\nyou said: hello" {
		t.Errorf("first user message %q", got)
	}

	model = replies(t)
	sink := &recSink{}
	res, err := runner.Run(context.Background(), hooked(t, model, set, root, sink, oneHook("UserPromptSubmit", "", `echo "no secrets in prompts" >&2; exit 2`)), "my password is x", runner.State{})
	if err != nil || res.Status != event.StatusFailed || res.Reason != event.ReasonHook || len(model.Requests()) != 0 {
		t.Fatalf("result %+v, err %v, %d requests", res, err, len(model.Requests()))
	}
	if rep := runner.Report(res, nil); !strings.Contains(rep.Detail, "a UserPromptSubmit hook refused the prompt: no secrets in prompts") {
		t.Errorf("detail %q", rep.Detail)
	}
	if len(sink.Of(event.MessageCompleted)) != 0 {
		t.Error("the refused prompt was recorded as a message")
	}
}

// A hook that outlives its timeout, or crashes, is a warning: the call
// runs and the run goes on.
func TestHookFailuresOnlyWarn(t *testing.T) {
	t.Parallel()
	set, root := newTools(t)
	model := replies(t, calls(tc("c1", "bash", bashArgs("touch ran"))), final("done"))
	sink := &recSink{}
	settings := `{"hooks": {"PreToolUse": [{"hooks": [
		{"type": "command", "command": "sleep 30", "timeout": 0.3},
		{"type": "command", "command": "kill -SEGV $$"}]}]}}`
	res, err := runner.Run(context.Background(), hooked(t, model, set, root, sink, settings), "go", runner.State{})
	if err != nil || res.Status != event.StatusCompleted || !fileExists(filepath.Join(root, "ran")) {
		t.Fatal(res, err)
	}
	var warnings []string
	for _, e := range sink.Of(event.Warning) {
		warnings = append(warnings, decode[event.WarningData](t, e).Message)
	}
	all := strings.Join(warnings, "\n")
	if !strings.Contains(all, `PreToolUse hook "sleep 30" timed out after 300ms`) || !strings.Contains(all, "killed by signal") {
		t.Errorf("warnings %q", warnings)
	}
	if recs := hookRecordsOf(t, sink); len(recs) != 2 || !recs[0].TimedOut || recs[0].ExitCode != -1 {
		t.Errorf("hook.completed = %+v", recs)
	}
}

// A run that waits for a person fires Notification, once per wait.
func TestHookNotification(t *testing.T) {
	t.Parallel()
	set, root := newTools(t)
	model := replies(t, calls(tc("c1", "bash", bashArgs("touch ran"))))
	sink := &recSink{}
	cfg := hooked(t, model, set, root, sink, oneHook("Notification", "permission_prompt",
		`jq -r .message >> "$CLAUDE_PROJECT_DIR/../told"`))
	cfg.Approvals, _ = approval.Parse([]string{"bash"})
	if _, err := runner.Run(context.Background(), cfg, "go", runner.State{}); !errors.Is(err, runner.ErrParked) {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(root, "..", "told")); got != "agent needs your permission to use Bash\n" {
		t.Errorf("Notification hook was told %q", got)
	}
}

// The cost of hooks per tool call: a loop of one read_file call with no
// hooks, with an empty PreToolUse hook (true), and with empty PreToolUse
// and PostToolUse hooks; added-ns/call is the difference from none.
func BenchmarkToolCallHooks(b *testing.B) {
	var none float64 // ns/op without hooks
	for _, c := range []struct{ name, settings string }{
		{"none", `{}`},
		{"PreToolUse-true", oneHook("PreToolUse", "*", "true")},
		{"PreToolUse+PostToolUse-true", `{"hooks": {"PreToolUse": [{"hooks": [{"type": "command", "command": "true"}]}],
			"PostToolUse": [{"hooks": [{"type": "command", "command": "true"}]}]}}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			ws, err := tools.NewWorkspace(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(ws.Root(), "a.txt"), []byte("a"), 0o644); err != nil {
				b.Fatal(err)
			}
			set, err := tools.NewSet(ws, tools.Options{})
			if err != nil {
				b.Fatal(err)
			}
			cfg := hooked(b, &alternating{}, set, ws.Root(), nopSink{}, c.settings)
			for b.Loop() {
				if _, err := runner.Run(context.Background(), cfg, "read", runner.State{}); err != nil {
					b.Fatal(err)
				}
			}
			perOp := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			if c.name == "none" {
				none = perOp
			} else if none > 0 {
				b.ReportMetric(perOp-none, "added-ns/call")
			}
		})
	}
}

// alternating answers with a read_file call, then a final answer, and
// so on; unlike fakeModel it keeps nothing, so each request costs the same.
type alternating struct{ n int }

func (m *alternating) Stream(context.Context, llm.Request, func(string)) (*llm.Response, error) {
	m.n++
	r := calls(tc("c1", "read_file", `{"path":"a.txt"}`))
	if m.n%2 == 0 {
		r = final("done")
	}
	return &r, nil
}

type nopSink struct{}

func (nopSink) Emit(context.Context, event.Event) error { return nil }

// PreCompact fires before a compaction, with trigger manual when the
// person asked for it (agent chat's /compact), and cannot stop it.
func TestHookPreCompact(t *testing.T) {
	t.Parallel()
	set, root := newTools(t)
	model := replies(t, final("SUMMARY: they talked"), final("done"))
	sink := &recSink{}
	cfg := hooked(t, model, set, root, sink, oneHook("PreCompact", "manual", `jq -r .trigger >> "$CLAUDE_PROJECT_DIR/../triggers"; exit 2`))
	cfg.Compact, cfg.CompactPrior = true, true
	prior := []llm.Message{{Role: llm.RoleUser, Content: "earlier"}, {Role: llm.RoleAssistant, Content: "reply"},
		{Role: llm.RoleUser, Content: "more"}, {Role: llm.RoleAssistant, Content: "again"}}
	if _, err := runner.Run(context.Background(), cfg, "next", runner.State{Prior: prior}); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(root, "..", "triggers")); got != "manual\n" {
		t.Errorf("PreCompact hook told trigger %q", got)
	}
	if len(sink.Of(event.ContextCompacted)) != 1 {
		t.Error("the hook's exit 2 stopped the compaction")
	}
}

// continue: false stops the run (reason hook), whatever the event: here
// after a call whose result is recorded, with no further request.
func TestHookContinueFalseStopsTheRun(t *testing.T) {
	t.Parallel()
	set, root := newTools(t)
	model := replies(t, calls(tc("c1", "bash", bashArgs("touch ran"))))
	res, err := runner.Run(context.Background(), hooked(t, model, set, root, &recSink{}, oneHook("PostToolUse", "Bash",
		`echo '{"continue": false, "stopReason": "the build quota is spent"}'`)), "go", runner.State{})
	if err != nil || res.Reason != event.ReasonHook || res.Detail != "a PostToolUse hook stopped the run: the build quota is spent" {
		t.Fatalf("result %+v, err %v", res, err)
	}
	if !fileExists(filepath.Join(root, "ran")) || len(model.Requests()) != 1 {
		t.Errorf("ran=%v after %d requests; want the call run and no request after", fileExists(filepath.Join(root, "ran")), len(model.Requests()))
	}
}
