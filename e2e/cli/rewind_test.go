package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"agent/checkpoint"
	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/llm/llmtest"
)

// Rewind end-to-end tests: `agent run` changes files in the workspace,
// `agent rewind` puts them back, as separate processes.

func writeFile(t *testing.T, e *e2etest.Env, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(e.Workspace, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// readWS returns a workspace file's content, or "<missing>".
func readWS(t *testing.T, e *e2etest.Env, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.Workspace, name))
	if os.IsNotExist(err) {
		return "<missing>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// runOK runs `agent run --json PROMPT`, expects success and returns the
// run's id and events.
func runOK(t *testing.T, e *e2etest.Env, prompt string) (string, []event.Event) {
	t.Helper()
	res := e.Run("run", "--json", prompt)
	if res.Code != 0 {
		t.Fatalf("run exit %d: %s", res.Code, res.Stderr)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	return evs[0].RunID, evs
}

// TestRewindRestoresAndRemoves: a run edits a file that existed and
// creates one that did not; rewind puts the first back and deletes the
// second, and records a rewind.completed in the run.
func TestRewindRestoresAndRemoves(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{
			e2etest.ToolCall("write_file", `{"path":"notes.txt","content":"rewritten\n"}`),
			e2etest.ToolCall("write_file", `{"path":"new/created.txt","content":"fresh\n"}`),
		}},
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("edit_file", `{"path":"notes.txt","old_string":"rewritten","new_string":"edited"}`)}},
		llmtest.Turn{Text: "Done."},
	)
	writeFile(t, e, "notes.txt", "original\n")
	if err := os.Chmod(filepath.Join(e.Workspace, "notes.txt"), 0o600); err != nil {
		t.Fatal(err)
	}
	runID, evs := runOK(t, e, "change the files")

	// One checkpoint per file, each right after its call's tool.started.
	var cps []event.CheckpointData
	for i, ev := range evs {
		if ev.Type != event.CheckpointCreated {
			continue
		}
		if evs[i-1].Type != event.ToolStarted {
			t.Errorf("checkpoint.created follows %s, want tool.started", evs[i-1].Type)
		}
		var d event.CheckpointData
		if err := ev.Decode(&d); err != nil {
			t.Fatal(err)
		}
		cps = append(cps, d)
	}
	if len(cps) != 2 || cps[0].Path != "notes.txt" || !cps[0].Existed || cps[1].Path != "new/created.txt" || cps[1].Existed {
		t.Fatalf("checkpoints = %+v, want notes.txt (existed) and new/created.txt (did not)", cps)
	}
	blob := filepath.Join(e.Home, "blobs", "sha256", cps[0].Blob[:2], cps[0].Blob)
	if b, err := os.ReadFile(blob); err != nil || string(b) != "original\n" {
		t.Errorf("saved content at %s = %q, %v", blob, b, err)
	}

	res := e.Run("rewind", runID[:8])
	if res.Code != 0 {
		t.Fatalf("rewind exit %d: %s", res.Code, res.Stderr)
	}
	want := "restored notes.txt\nremoved new/created.txt\n"
	if !strings.HasPrefix(res.Stdout, want) || !strings.Contains(res.Stdout, "1 restored, 1 removed, 0 skipped, 0 failed") {
		t.Errorf("rewind output:\n%s\nwant it to start with:\n%s", res.Stdout, want)
	}
	if got := readWS(t, e, "notes.txt"); got != "original\n" {
		t.Errorf("notes.txt = %q after rewind", got)
	}
	if fi, err := os.Stat(filepath.Join(e.Workspace, "notes.txt")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("notes.txt mode after rewind = %v, %v; want 0600 as before", fi.Mode().Perm(), err)
	}
	if got := readWS(t, e, "new/created.txt"); got != "<missing>" {
		t.Errorf("new/created.txt = %q after rewind, want it removed", got)
	}

	// The rewind is part of the run's history.
	events := decodeEventLines(t, e.Run("runs", "events", runID, "--json").Stdout)
	last := events[len(events)-1]
	var rep checkpoint.Report
	if last.Type != event.RewindCompleted || last.Decode(&rep) != nil || len(rep.Files) != 2 || rep.RunID != runID {
		t.Errorf("last event = %s %s, want rewind.completed with two files", last.Type, last.Data)
	}

	// A second rewind finds everything already in place.
	again := e.Run("rewind", runID)
	if again.Code != 0 || !strings.Contains(again.Stdout, "restored notes.txt (already as before the run)") {
		t.Errorf("second rewind: exit %d\n%s", again.Code, again.Stdout)
	}
}

// TestRewindSkipsFilesChangedAfterTheRun: a file edited after the run is
// left alone unless --force.
func TestRewindSkipsFilesChangedAfterTheRun(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{
			e2etest.ToolCall("write_file", `{"path":"a.txt","content":"by the run\n"}`),
			e2etest.ToolCall("write_file", `{"path":"b.txt","content":"by the run\n"}`),
		}},
		llmtest.Turn{Text: "Done."},
	)
	writeFile(t, e, "a.txt", "a before\n")
	writeFile(t, e, "b.txt", "b before\n")
	runID, _ := runOK(t, e, "write")
	writeFile(t, e, "a.txt", "my own edit\n")

	res := e.Run("rewind", runID)
	if res.Code != 0 {
		t.Fatalf("rewind exit %d: %s", res.Code, res.Stderr)
	}
	if !strings.Contains(res.Stdout, "skipped a.txt: changed after the run (use --force)\n") ||
		!strings.Contains(res.Stdout, "restored b.txt\n") {
		t.Errorf("rewind output:\n%s", res.Stdout)
	}
	if got := readWS(t, e, "a.txt"); got != "my own edit\n" {
		t.Errorf("a.txt = %q: rewind overwrote a change made after the run", got)
	}

	res = e.Run("rewind", runID, "--force")
	if res.Code != 0 || !strings.Contains(res.Stdout, "restored a.txt\n") {
		t.Errorf("rewind --force: exit %d\n%s", res.Code, res.Stdout)
	}
	if got := readWS(t, e, "a.txt"); got != "a before\n" {
		t.Errorf("a.txt = %q after --force", got)
	}
}

// TestRewindJSONAndTo: --to N rewinds only files first changed at
// checkpoint N or later; --json prints one object.
func TestRewindJSONAndTo(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("write_file", `{"path":"one.txt","content":"1 after\n"}`)}},
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("write_file", `{"path":"two.txt","content":"2 after\n"}`)}},
		llmtest.Turn{ToolCalls: []llmtest.Call{
			e2etest.ToolCall("write_file", `{"path":"one.txt","content":"1 again\n"}`),
			e2etest.ToolCall("write_file", `{"path":"three.txt","content":"3\n"}`),
		}},
		llmtest.Turn{Text: "Done."},
	)
	writeFile(t, e, "one.txt", "1 before\n")
	writeFile(t, e, "two.txt", "2 before\n")
	runID, _ := runOK(t, e, "write three files")

	list := e.Run("rewind", runID, "--list")
	if list.Code != 0 || !strings.Contains(list.Stdout, "3  three.txt  did not exist") {
		t.Errorf("rewind --list: exit %d\n%s", list.Code, list.Stdout)
	}

	res := e.Run("rewind", runID, "--to", "2", "--json")
	if res.Code != 0 {
		t.Fatalf("rewind exit %d: %s", res.Code, res.Stderr)
	}
	var out map[string]json.RawMessage
	if err := json.Unmarshal([]byte(res.Stdout), &out); err != nil || strings.Count(strings.TrimSpace(res.Stdout), "\n") != 0 {
		t.Fatalf("--json output is not one object: %v\n%s", err, res.Stdout)
	}
	var files []map[string]string
	if string(out["run_id"]) != `"`+runID+`"` || string(out["to"]) != "2" || json.Unmarshal(out["files"], &files) != nil {
		t.Fatalf("--json = %s", res.Stdout)
	}
	want := []map[string]string{{"path": "two.txt", "outcome": "restored"}, {"path": "three.txt", "outcome": "removed"}}
	if !e2etest.EqualJSON(t, files, want) {
		t.Errorf("files = %v, want %v", files, want)
	}
	if readWS(t, e, "one.txt") != "1 again\n" || readWS(t, e, "two.txt") != "2 before\n" || readWS(t, e, "three.txt") != "<missing>" {
		t.Errorf("after --to 2: one=%q two=%q three=%q", readWS(t, e, "one.txt"), readWS(t, e, "two.txt"), readWS(t, e, "three.txt"))
	}

	// A skipped file says why in the JSON too.
	writeFile(t, e, "one.txt", "edited later\n")
	res = e.Run("rewind", runID, "--json")
	var rep checkpoint.Report
	if err := json.Unmarshal([]byte(res.Stdout), &rep); err != nil || len(rep.Files) != 3 ||
		rep.Files[0].Outcome != event.StatusSkipped || !strings.Contains(rep.Files[0].Reason, "changed after the run") {
		t.Errorf("rewind --json = %s (%v)", res.Stdout, err)
	}
}

// TestRewindBadInput: an unknown run and a --to out of range exit 2, a run
// that changed no files says so and exits 0.
func TestRewindBadInput(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, llmtest.Turn{Text: "Nothing to change."})
	runID, _ := runOK(t, e, "look around")

	if res := e.Run("rewind", "0000dead-not-a-run"); res.Code != 2 || !strings.Contains(res.Stderr, "not found") {
		t.Errorf("unknown run: exit %d %q, want 2", res.Code, res.Stderr)
	}
	if res := e.Run("rewind"); res.Code != 2 {
		t.Errorf("no run id: exit %d, want 2", res.Code)
	}
	if res := e.Run("rewind", runID, "--to", "0"); res.Code != 2 {
		t.Errorf("--to 0: exit %d, want 2", res.Code)
	}
	res := e.Run("rewind", runID)
	if res.Code != 0 || !strings.Contains(res.Stdout, "has no checkpoints") {
		t.Errorf("run without checkpoints: exit %d %q", res.Code, res.Stdout)
	}
	res = e.Run("rewind", runID, "--json")
	if res.Code != 0 || strings.TrimSpace(res.Stdout) != `{"run_id":"`+runID+`","to":0,"files":[]}` {
		t.Errorf("run without checkpoints --json: exit %d %s", res.Code, res.Stdout)
	}
}

func TestRewindToOutOfRange(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("write_file", `{"path":"a.txt","content":"a"}`)}},
		llmtest.Turn{Text: "Done."},
	)
	runID, _ := runOK(t, e, "write a")
	res := e.Run("rewind", runID, "--to", "2")
	if res.Code != 2 || !strings.Contains(res.Stderr, "checkpoints 1 to 1") {
		t.Errorf("--to 2 of 1: exit %d %q, want 2", res.Code, res.Stderr)
	}
	if readWS(t, e, "a.txt") != "a" {
		t.Error("a rejected rewind changed a file")
	}
}

// TestRewindHarnessRun: a phase child checkpoints files the same way, its
// parent records the events, and rewind undoes the phase's writes.
func TestRewindHarnessRun(t *testing.T) {
	t.Parallel()
	e := e2etest.NewHarness(t,
		e2etest.WriteTurn("report.md", "# Report\n"),
		llmtest.Turn{Text: "report.md is written."},
	)
	writeFile(t, e, "report.md", "old report\n")
	planPath := e.WritePlan(t, `{"objective":"Write the report","phases":[
		{"id":"write","title":"Write","instructions":"Write report.md.","evidence":{"type":"artifact","artifacts":["report.md"]}}]}`)
	res := e.Run("harness", "--json", "--plan-file", planPath)
	if res.Code != 0 {
		t.Fatalf("harness exit %d: %s", res.Code, res.Stderr)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	cps := e2etest.OfType(evs, event.CheckpointCreated)
	if len(cps) != 1 || cps[0].PhaseID != "write" {
		t.Fatalf("checkpoints = %+v, want one from phase write", cps)
	}
	rw := e.Run("rewind", evs[0].RunID)
	if rw.Code != 0 || !strings.HasPrefix(rw.Stdout, "restored report.md\n") {
		t.Errorf("rewind: exit %d\n%s%s", rw.Code, rw.Stdout, rw.Stderr)
	}
	if got := readWS(t, e, "report.md"); got != "old report\n" {
		t.Errorf("report.md = %q after rewind", got)
	}
}

// decodeEventLines parses JSON lines without the run-stream checks of
// DecodeEvents: a rewind adds events after the terminal one.
func decodeEventLines(t *testing.T, stdout string) []event.Event {
	t.Helper()
	var evs []event.Event
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var ev event.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("not an event line: %q", line)
		}
		evs = append(evs, ev)
	}
	return evs
}
