package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"agent/checkpoint"
	"agent/event"
	"agent/llm/llmtest"
)

// Rewind end-to-end tests: `agent run` changes files in the workspace,
// `agent rewind` puts them back, as separate processes.

func (e *e2e) writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(e.workspace, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// readWS returns a workspace file's content, or "<missing>".
func (e *e2e) readWS(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.workspace, name))
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
func (e *e2e) runOK(t *testing.T, prompt string) (string, []event.Event) {
	t.Helper()
	res := e.run("run", "--json", prompt)
	if res.code != 0 {
		t.Fatalf("run exit %d: %s", res.code, res.stderr)
	}
	evs := decodeEvents(t, res.stdout)
	return evs[0].RunID, evs
}

// TestRewindRestoresAndRemoves: a run edits a file that existed and
// creates one that did not; rewind puts the first back and deletes the
// second, and records a rewind.completed in the run.
func TestRewindRestoresAndRemoves(t *testing.T) {
	t.Parallel()
	e := newE2E(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{
			call("write_file", `{"path":"notes.txt","content":"rewritten\n"}`),
			call("write_file", `{"path":"new/created.txt","content":"fresh\n"}`),
		}},
		llmtest.Turn{ToolCalls: []llmtest.Call{call("edit_file", `{"path":"notes.txt","old_string":"rewritten","new_string":"edited"}`)}},
		llmtest.Turn{Text: "Done."},
	)
	e.writeFile(t, "notes.txt", "original\n")
	if err := os.Chmod(filepath.Join(e.workspace, "notes.txt"), 0o600); err != nil {
		t.Fatal(err)
	}
	runID, evs := e.runOK(t, "change the files")

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
	blob := filepath.Join(e.home, "blobs", "sha256", cps[0].Blob[:2], cps[0].Blob)
	if b, err := os.ReadFile(blob); err != nil || string(b) != "original\n" {
		t.Errorf("saved content at %s = %q, %v", blob, b, err)
	}

	res := e.run("rewind", runID[:8])
	if res.code != 0 {
		t.Fatalf("rewind exit %d: %s", res.code, res.stderr)
	}
	want := "restored notes.txt\nremoved new/created.txt\n"
	if !strings.HasPrefix(res.stdout, want) || !strings.Contains(res.stdout, "1 restored, 1 removed, 0 skipped, 0 failed") {
		t.Errorf("rewind output:\n%s\nwant it to start with:\n%s", res.stdout, want)
	}
	if got := e.readWS(t, "notes.txt"); got != "original\n" {
		t.Errorf("notes.txt = %q after rewind", got)
	}
	if fi, err := os.Stat(filepath.Join(e.workspace, "notes.txt")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("notes.txt mode after rewind = %v, %v; want 0600 as before", fi.Mode().Perm(), err)
	}
	if got := e.readWS(t, "new/created.txt"); got != "<missing>" {
		t.Errorf("new/created.txt = %q after rewind, want it removed", got)
	}

	// The rewind is part of the run's history.
	events := decodeEventLines(t, e.run("runs", "events", runID, "--json").stdout)
	last := events[len(events)-1]
	var rep checkpoint.Report
	if last.Type != event.RewindCompleted || last.Decode(&rep) != nil || len(rep.Files) != 2 || rep.RunID != runID {
		t.Errorf("last event = %s %s, want rewind.completed with two files", last.Type, last.Data)
	}

	// A second rewind finds everything already in place.
	again := e.run("rewind", runID)
	if again.code != 0 || !strings.Contains(again.stdout, "restored notes.txt (already as before the run)") {
		t.Errorf("second rewind: exit %d\n%s", again.code, again.stdout)
	}
}

// TestRewindSkipsFilesChangedAfterTheRun: a file edited after the run is
// left alone unless --force.
func TestRewindSkipsFilesChangedAfterTheRun(t *testing.T) {
	t.Parallel()
	e := newE2E(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{
			call("write_file", `{"path":"a.txt","content":"by the run\n"}`),
			call("write_file", `{"path":"b.txt","content":"by the run\n"}`),
		}},
		llmtest.Turn{Text: "Done."},
	)
	e.writeFile(t, "a.txt", "a before\n")
	e.writeFile(t, "b.txt", "b before\n")
	runID, _ := e.runOK(t, "write")
	e.writeFile(t, "a.txt", "my own edit\n")

	res := e.run("rewind", runID)
	if res.code != 0 {
		t.Fatalf("rewind exit %d: %s", res.code, res.stderr)
	}
	if !strings.Contains(res.stdout, "skipped a.txt: changed after the run (use --force)\n") ||
		!strings.Contains(res.stdout, "restored b.txt\n") {
		t.Errorf("rewind output:\n%s", res.stdout)
	}
	if got := e.readWS(t, "a.txt"); got != "my own edit\n" {
		t.Errorf("a.txt = %q: rewind overwrote a change made after the run", got)
	}

	res = e.run("rewind", runID, "--force")
	if res.code != 0 || !strings.Contains(res.stdout, "restored a.txt\n") {
		t.Errorf("rewind --force: exit %d\n%s", res.code, res.stdout)
	}
	if got := e.readWS(t, "a.txt"); got != "a before\n" {
		t.Errorf("a.txt = %q after --force", got)
	}
}

// TestRewindJSONAndTo: --to N rewinds only files first changed at
// checkpoint N or later; --json prints one object.
func TestRewindJSONAndTo(t *testing.T) {
	t.Parallel()
	e := newE2E(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{call("write_file", `{"path":"one.txt","content":"1 after\n"}`)}},
		llmtest.Turn{ToolCalls: []llmtest.Call{call("write_file", `{"path":"two.txt","content":"2 after\n"}`)}},
		llmtest.Turn{ToolCalls: []llmtest.Call{
			call("write_file", `{"path":"one.txt","content":"1 again\n"}`),
			call("write_file", `{"path":"three.txt","content":"3\n"}`),
		}},
		llmtest.Turn{Text: "Done."},
	)
	e.writeFile(t, "one.txt", "1 before\n")
	e.writeFile(t, "two.txt", "2 before\n")
	runID, _ := e.runOK(t, "write three files")

	list := e.run("rewind", runID, "--list")
	if list.code != 0 || !strings.Contains(list.stdout, "3  three.txt  did not exist") {
		t.Errorf("rewind --list: exit %d\n%s", list.code, list.stdout)
	}

	res := e.run("rewind", runID, "--to", "2", "--json")
	if res.code != 0 {
		t.Fatalf("rewind exit %d: %s", res.code, res.stderr)
	}
	var out map[string]json.RawMessage
	if err := json.Unmarshal([]byte(res.stdout), &out); err != nil || strings.Count(strings.TrimSpace(res.stdout), "\n") != 0 {
		t.Fatalf("--json output is not one object: %v\n%s", err, res.stdout)
	}
	var files []map[string]string
	if string(out["run_id"]) != `"`+runID+`"` || string(out["to"]) != "2" || json.Unmarshal(out["files"], &files) != nil {
		t.Fatalf("--json = %s", res.stdout)
	}
	want := []map[string]string{{"path": "two.txt", "outcome": "restored"}, {"path": "three.txt", "outcome": "removed"}}
	if !equalJSON(t, files, want) {
		t.Errorf("files = %v, want %v", files, want)
	}
	if e.readWS(t, "one.txt") != "1 again\n" || e.readWS(t, "two.txt") != "2 before\n" || e.readWS(t, "three.txt") != "<missing>" {
		t.Errorf("after --to 2: one=%q two=%q three=%q", e.readWS(t, "one.txt"), e.readWS(t, "two.txt"), e.readWS(t, "three.txt"))
	}

	// A skipped file says why in the JSON too.
	e.writeFile(t, "one.txt", "edited later\n")
	res = e.run("rewind", runID, "--json")
	var rep checkpoint.Report
	if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil || len(rep.Files) != 3 ||
		rep.Files[0].Outcome != checkpoint.Skipped || !strings.Contains(rep.Files[0].Reason, "changed after the run") {
		t.Errorf("rewind --json = %s (%v)", res.stdout, err)
	}
}

// TestRewindBadInput: an unknown run and a --to out of range exit 2, a run
// that changed no files says so and exits 0.
func TestRewindBadInput(t *testing.T) {
	t.Parallel()
	e := newE2E(t, llmtest.Turn{Text: "Nothing to change."})
	runID, _ := e.runOK(t, "look around")

	if res := e.run("rewind", "0000dead-not-a-run"); res.code != 2 || !strings.Contains(res.stderr, "not found") {
		t.Errorf("unknown run: exit %d %q, want 2", res.code, res.stderr)
	}
	if res := e.run("rewind"); res.code != 2 {
		t.Errorf("no run id: exit %d, want 2", res.code)
	}
	if res := e.run("rewind", runID, "--to", "0"); res.code != 2 {
		t.Errorf("--to 0: exit %d, want 2", res.code)
	}
	res := e.run("rewind", runID)
	if res.code != 0 || !strings.Contains(res.stdout, "has no checkpoints") {
		t.Errorf("run without checkpoints: exit %d %q", res.code, res.stdout)
	}
	res = e.run("rewind", runID, "--json")
	if res.code != 0 || strings.TrimSpace(res.stdout) != `{"run_id":"`+runID+`","to":0,"files":[]}` {
		t.Errorf("run without checkpoints --json: exit %d %s", res.code, res.stdout)
	}
}

func TestRewindToOutOfRange(t *testing.T) {
	t.Parallel()
	e := newE2E(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{call("write_file", `{"path":"a.txt","content":"a"}`)}},
		llmtest.Turn{Text: "Done."},
	)
	runID, _ := e.runOK(t, "write a")
	res := e.run("rewind", runID, "--to", "2")
	if res.code != 2 || !strings.Contains(res.stderr, "checkpoints 1 to 1") {
		t.Errorf("--to 2 of 1: exit %d %q, want 2", res.code, res.stderr)
	}
	if e.readWS(t, "a.txt") != "a" {
		t.Error("a rejected rewind changed a file")
	}
}

// TestRewindHarnessRun: a phase child checkpoints files the same way, its
// parent records the events, and rewind undoes the phase's writes.
func TestRewindHarnessRun(t *testing.T) {
	t.Parallel()
	e := newHarness(t,
		writeTurn("report.md", "# Report\n"),
		llmtest.Turn{Text: "report.md is written."},
	)
	e.writeFile(t, "report.md", "old report\n")
	planPath := e.writePlan(t, `{"objective":"Write the report","phases":[
		{"id":"write","title":"Write","instructions":"Write report.md.","evidence":{"type":"artifact","artifacts":["report.md"]}}]}`)
	res := e.run("harness", "--json", "--plan-file", planPath)
	if res.code != 0 {
		t.Fatalf("harness exit %d: %s", res.code, res.stderr)
	}
	evs := decodeEvents(t, res.stdout)
	cps := ofType(evs, event.CheckpointCreated)
	if len(cps) != 1 || cps[0].PhaseID != "write" {
		t.Fatalf("checkpoints = %+v, want one from phase write", cps)
	}
	rw := e.run("rewind", evs[0].RunID)
	if rw.code != 0 || !strings.HasPrefix(rw.stdout, "restored report.md\n") {
		t.Errorf("rewind: exit %d\n%s%s", rw.code, rw.stdout, rw.stderr)
	}
	if got := e.readWS(t, "report.md"); got != "old report\n" {
		t.Errorf("report.md = %q after rewind", got)
	}
}

// decodeEventLines parses JSON lines without the run-stream checks of
// decodeEvents: a rewind adds events after the terminal one.
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
