package cli

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/llm/llmtest"
	"agent/store"
)

// prune end-to-end tests: `agent prune` on runs made by the real binary,
// then rewind and resume of what it left.

// pruneJSON runs `agent prune ARGS --json` and decodes its report.
func pruneJSON(t *testing.T, e *e2etest.Env, args ...string) e2etest.PruneView {
	t.Helper()
	res := e.Run(append(append([]string{"prune"}, args...), "--json")...)
	if res.Code != 0 {
		t.Fatalf("prune %v: exit %d: %s", args, res.Code, res.Stderr)
	}
	var v e2etest.PruneView
	if err := json.Unmarshal([]byte(res.Stdout), &v); err != nil {
		t.Fatalf("prune --json: %v: %q", err, res.Stdout)
	}
	return v
}

func showJSON(t *testing.T, e *e2etest.Env, runID string) e2etest.RunView {
	t.Helper()
	res := e.Run("runs", "show", runID, "--json")
	if res.Code != 0 {
		t.Fatalf("runs show: exit %d: %s", res.Code, res.Stderr)
	}
	var v e2etest.RunView
	if err := json.Unmarshal([]byte(res.Stdout), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func eventsJSON(t *testing.T, e *e2etest.Env, runID string) []event.Event {
	t.Helper()
	res := e.Run("runs", "events", runID, "--json")
	if res.Code != 0 {
		t.Fatalf("runs events: exit %d: %s", res.Code, res.Stderr)
	}
	var evs []event.Event
	for _, line := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
		var ev event.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// TestPruneCLI: a completed run that changed a file and read a big one is
// pruned; an interrupted run is not. The pruned run keeps its result and
// checkpoints, so rewind puts the file back; the interrupted run resumes
// and finishes. A dry run reports the same and changes nothing; a second
// prune finds nothing.
func TestPruneCLI(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("write_file", `{"path":"notes.txt","content":"rewritten\n"}`)}},
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("read_file", `{"path":"big.txt"}`)}},
		llmtest.Turn{Text: "Done: the notes are rewritten."},
		llmtest.Turn{Text: "Let me think", Hang: true},
		llmtest.Turn{Text: "Finished after the interruption."},
	)
	writeFile(t, e, "notes.txt", "original\n")
	big := strings.Repeat("a line of the big file\n", 400)
	writeFile(t, e, "big.txt", big)
	done, doneEvents := runOK(t, e, "rewrite the notes")

	b := e.Start("run", "--json", "think hard")
	interrupted := b.WaitEvent(t, event.RunStarted).RunID
	e2etest.WaitFor(t, "the model call", func() bool { return e.Srv.RequestCount() == 4 })
	if err := b.Cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	<-b.Done
	var exit *exec.ExitError
	if err := b.Cmd.Wait(); !errors.As(err, &exit) || exit.ExitCode() != 130 {
		t.Fatalf("after SIGINT: %v, want exit 130", err)
	}
	interruptedEvents := eventsJSON(t, e, interrupted)

	deltas := 0
	for _, ev := range doneEvents {
		if ev.Type == event.MessageDelta {
			deltas++
		}
	}
	if deltas == 0 {
		t.Fatal("the run streamed no deltas: nothing to test")
	}

	dry := pruneJSON(t, e, "--older-than", "0s", "--dry-run")
	if got := eventsJSON(t, e, done); len(got) != len(doneEvents) {
		t.Fatalf("the dry run changed the run: %d events, had %d", len(got), len(doneEvents))
	}
	if showJSON(t, e, done).PrunedAt != nil {
		t.Fatal("the dry run marked the run pruned")
	}
	rep := pruneJSON(t, e, "--older-than", "0s")
	if !dry.DryRun || rep.DryRun {
		t.Errorf("dry_run: %v then %v", dry.DryRun, rep.DryRun)
	}
	// Both outputs (write_file's and read_file's) and the tool messages
	// of this completed run outside a session.
	if rep.Runs != 1 || len(rep.RunIDs) != 1 || rep.RunIDs[0] != done || rep.Deltas != int64(deltas) ||
		rep.ToolOutputs != 2 || rep.ToolMessages != 2 || rep.Bytes < int64(len(big)) {
		t.Errorf("report = %+v; want run %s with %d deltas, 2 tool outputs, over %d bytes", rep, done, deltas, len(big))
	}
	dry.DryRun, dry.Before = false, rep.Before
	if !jsonEqual(t, dry, rep) {
		t.Errorf("the dry run reported %+v, the prune %+v", dry, rep)
	}

	// The pruned run: no deltas, outputs replaced, all else kept.
	evs := eventsJSON(t, e, done)
	if len(evs) != len(doneEvents)-deltas {
		t.Errorf("%d events after the prune, want %d", len(evs), len(doneEvents)-deltas)
	}
	for _, ev := range evs {
		var d event.ToolCompletedData
		if ev.Type == event.ToolCompleted && (ev.Decode(&d) != nil || d.Output != store.PrunedOutput || !d.OK || d.Name == "") {
			t.Errorf("tool.completed after the prune: %s", ev.Data)
		}
		if ev.Type == event.MessageDelta {
			t.Errorf("a delta survived: %s", ev.Data)
		}
	}
	v := showJSON(t, e, done)
	if v.PrunedAt == nil || v.Status != "completed" || v.Result != "Done: the notes are rewritten." || len(v.ToolCalls) != 2 {
		t.Errorf("runs show --json of the pruned run: %+v", v)
	}
	for _, m := range v.Messages {
		if m.Role == "tool" && m.Content != store.PrunedOutput {
			t.Errorf("tool message kept: %q", m.Content)
		}
	}
	if show := e.Run("runs", "show", done); !strings.Contains(show.Stdout, "pruned    on ") || !strings.Contains(show.Stdout, "message deltas and tool outputs removed") {
		t.Errorf("runs show does not say the run was pruned:\n%s", show.Stdout)
	}
	// The interrupted run is as it was.
	if got := eventsJSON(t, e, interrupted); len(got) != len(interruptedEvents) || showJSON(t, e, interrupted).PrunedAt != nil {
		t.Errorf("the interrupted run was pruned")
	}

	// Twice is once.
	if again := pruneJSON(t, e, "--older-than", "0s"); again.Runs != 0 || again.Deltas != 0 || again.ToolOutputs != 0 || again.Bytes != 0 {
		t.Errorf("second prune = %+v, want nothing", again)
	}

	// Rewind still has its checkpoints.
	rw := e.Run("rewind", done)
	if rw.Code != 0 || readWS(t, e, "notes.txt") != "original\n" {
		t.Errorf("rewind of the pruned run: exit %d, notes.txt %q: %s%s", rw.Code, readWS(t, e, "notes.txt"), rw.Stdout, rw.Stderr)
	}
	// Resume of the interrupted run still works.
	res := e.Run("resume", interrupted, "--json")
	if res.Code != 0 {
		t.Fatalf("resume after prune: exit %d: %s", res.Code, res.Stderr)
	}
	if fin := e2etest.LastFinished(t, e2etest.DecodeEvents(t, res.Stdout)); fin.Result != "Finished after the interruption." {
		t.Errorf("resumed result = %q", fin.Result)
	}
}

// jsonEqual compares two values as JSON.
func jsonEqual(t *testing.T, a, b any) bool {
	t.Helper()
	x, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(x) == string(y)
}

// TestPruneBadInput: --older-than is required and must be a duration;
// each mistake is one line and exit 2.
func TestPruneBadInput(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"prune"}, "prune needs --older-than DURATION"},
		{[]string{"prune", "--older-than", "3x"}, `--older-than "3x": want a duration such as 720h, or a number of days such as 30d`},
		{[]string{"prune", "--older-than", "-2h"}, "must not be negative"},
		{[]string{"prune", "--older-than", "999999999d"}, "is too long"},
		{[]string{"prune", "--older-than", "1d", "extra"}, "prune takes no arguments"},
	} {
		res := e.Run(tc.args...)
		if res.Code != 2 || !strings.Contains(res.Stderr, tc.want) || strings.Count(strings.TrimSpace(res.Stderr), "\n") != 0 {
			t.Errorf("agent %v: exit %d, stderr %q; want exit 2 and one line with %q", tc.args, res.Code, res.Stderr, tc.want)
		}
	}
	// 30d and 720h are the same age.
	for _, age := range []string{"30d", "720h"} {
		if v := pruneJSON(t, e, "--older-than", age, "--dry-run"); v.OlderThan != "720h0m0s" {
			t.Errorf("--older-than %s = %s", age, v.OlderThan)
		}
	}
}
