package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"agent/event"
	"agent/llm/llmtest"
	"agent/store"
)

// prune end-to-end tests: `agent prune` on runs made by the real binary,
// then rewind and resume of what it left.

// pruneJSON runs `agent prune ARGS --json` and decodes its report.
func (e *e2e) pruneJSON(t *testing.T, args ...string) pruneView {
	t.Helper()
	res := e.run(append(append([]string{"prune"}, args...), "--json")...)
	if res.code != 0 {
		t.Fatalf("prune %v: exit %d: %s", args, res.code, res.stderr)
	}
	var v pruneView
	if err := json.Unmarshal([]byte(res.stdout), &v); err != nil {
		t.Fatalf("prune --json: %v: %q", err, res.stdout)
	}
	return v
}

func (e *e2e) showJSON(t *testing.T, runID string) runView {
	t.Helper()
	res := e.run("runs", "show", runID, "--json")
	if res.code != 0 {
		t.Fatalf("runs show: exit %d: %s", res.code, res.stderr)
	}
	var v runView
	if err := json.Unmarshal([]byte(res.stdout), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func (e *e2e) eventsJSON(t *testing.T, runID string) []event.Event {
	t.Helper()
	res := e.run("runs", "events", runID, "--json")
	if res.code != 0 {
		t.Fatalf("runs events: exit %d: %s", res.code, res.stderr)
	}
	var evs []event.Event
	for _, line := range strings.Split(strings.TrimSpace(res.stdout), "\n") {
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
	e := newE2E(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{call("write_file", `{"path":"notes.txt","content":"rewritten\n"}`)}},
		llmtest.Turn{ToolCalls: []llmtest.Call{call("read_file", `{"path":"big.txt"}`)}},
		llmtest.Turn{Text: "Done: the notes are rewritten."},
		llmtest.Turn{Text: "Let me think", Hang: true},
		llmtest.Turn{Text: "Finished after the interruption."},
	)
	e.writeFile(t, "notes.txt", "original\n")
	big := strings.Repeat("a line of the big file\n", 400)
	e.writeFile(t, "big.txt", big)
	done, doneEvents := e.runOK(t, "rewrite the notes")

	b := e.start("run", "--json", "think hard")
	interrupted := b.waitEvent(t, event.RunStarted).RunID
	waitFor(t, "the model call", func() bool { return e.srv.RequestCount() == 4 })
	if err := b.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	<-b.done
	var exit *exec.ExitError
	if err := b.cmd.Wait(); !errors.As(err, &exit) || exit.ExitCode() != 130 {
		t.Fatalf("after SIGINT: %v, want exit 130", err)
	}
	interruptedEvents := e.eventsJSON(t, interrupted)

	deltas := 0
	for _, ev := range doneEvents {
		if ev.Type == event.MessageDelta {
			deltas++
		}
	}
	if deltas == 0 {
		t.Fatal("the run streamed no deltas: nothing to test")
	}

	dry := e.pruneJSON(t, "--older-than", "0s", "--dry-run")
	if got := e.eventsJSON(t, done); len(got) != len(doneEvents) {
		t.Fatalf("the dry run changed the run: %d events, had %d", len(got), len(doneEvents))
	}
	if e.showJSON(t, done).PrunedAt != nil {
		t.Fatal("the dry run marked the run pruned")
	}
	rep := e.pruneJSON(t, "--older-than", "0s")
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
	evs := e.eventsJSON(t, done)
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
	v := e.showJSON(t, done)
	if v.PrunedAt == nil || v.Status != "completed" || v.Result != "Done: the notes are rewritten." || len(v.ToolCalls) != 2 {
		t.Errorf("runs show --json of the pruned run: %+v", v)
	}
	for _, m := range v.Messages {
		if m.Role == "tool" && m.Content != store.PrunedOutput {
			t.Errorf("tool message kept: %q", m.Content)
		}
	}
	if show := e.run("runs", "show", done); !strings.Contains(show.stdout, "pruned    on ") || !strings.Contains(show.stdout, "message deltas and tool outputs removed") {
		t.Errorf("runs show does not say the run was pruned:\n%s", show.stdout)
	}
	// The interrupted run is as it was.
	if got := e.eventsJSON(t, interrupted); len(got) != len(interruptedEvents) || e.showJSON(t, interrupted).PrunedAt != nil {
		t.Errorf("the interrupted run was pruned")
	}

	// Twice is once.
	if again := e.pruneJSON(t, "--older-than", "0s"); again.Runs != 0 || again.Deltas != 0 || again.ToolOutputs != 0 || again.Bytes != 0 {
		t.Errorf("second prune = %+v, want nothing", again)
	}

	// Rewind still has its checkpoints.
	rw := e.run("rewind", done)
	if rw.code != 0 || e.readWS(t, "notes.txt") != "original\n" {
		t.Errorf("rewind of the pruned run: exit %d, notes.txt %q: %s%s", rw.code, e.readWS(t, "notes.txt"), rw.stdout, rw.stderr)
	}
	// Resume of the interrupted run still works.
	res := e.run("resume", interrupted, "--json")
	if res.code != 0 {
		t.Fatalf("resume after prune: exit %d: %s", res.code, res.stderr)
	}
	if fin := lastFinished(t, decodeEvents(t, res.stdout)); fin.Result != "Finished after the interruption." {
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
	e := newE2E(t)
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
		res := e.run(tc.args...)
		if res.code != 2 || !strings.Contains(res.stderr, tc.want) || strings.Count(strings.TrimSpace(res.stderr), "\n") != 0 {
			t.Errorf("agent %v: exit %d, stderr %q; want exit 2 and one line with %q", tc.args, res.code, res.stderr, tc.want)
		}
	}
	// 30d and 720h are the same age.
	for _, age := range []string{"30d", "720h"} {
		if v := e.pruneJSON(t, "--older-than", age, "--dry-run"); v.OlderThan != "720h0m0s" {
			t.Errorf("--older-than %s = %s", age, v.OlderThan)
		}
	}
}
