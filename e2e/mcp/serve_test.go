package mcp

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/llm/llmtest"
	"agent/mcpserve"
	"agent/store"
)

// Tests of agent mcp serve as an MCP client uses it: the real binary
// started as a subprocess, driven through the official SDK's client, with
// the runs it starts checked through the CLI and the store.

// served is an agent mcp serve process and a client session to it.
type served struct {
	cmd    *exec.Cmd
	sess   *sdk.ClientSession
	stderr string // the server's stderr file
}

// serve starts agent mcp serve in the test's workspace, with env added to
// its environment, and connects to it.
// Runs it leaves running when the test ends are killed.
func serve(t *testing.T, e *e2etest.Env, env ...string) *served {
	t.Helper()
	killDetachedRunsAtCleanup(t, e)
	cmd := e.Command("mcp", "serve")
	cmd.Env = append(cmd.Env, env...) // the last of a name wins
	stderr := filepath.Join(t.TempDir(), "serve.stderr")
	f, err := os.Create(stderr)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = f
	// A process group of its own, as clients start servers: a test can
	// stop the group as a client does.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	ctx, cancel := context.WithTimeout(context.Background(), e2etest.Patience)
	defer cancel()
	client := sdk.NewClient(&sdk.Implementation{Name: "mcp-serve-test", Version: "v0"}, nil)
	sess, err := client.Connect(ctx, &sdk.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}, nil)
	if err != nil {
		f.Close()
		t.Fatalf("connect to agent mcp serve: %v", err)
	}
	t.Cleanup(func() {
		_ = sess.Close()
		f.Close()
	})
	return &served{cmd: cmd, sess: sess, stderr: stderr}
}

// killDetachedRunsAtCleanup kills, when the test ends, the processes still
// driving this test's runs (they are detached from the server on purpose).
func killDetachedRunsAtCleanup(t *testing.T, e *e2etest.Env) {
	t.Cleanup(func() {
		db, err := store.Open(filepath.Join(e.Home, "agent.db"))
		if err != nil {
			return
		}
		defer db.Close()
		runs, _ := db.ListRuns(context.Background(), 0)
		for _, r := range runs {
			if _, pid, ok := store.OwnerProcess(r.LeaseOwner); ok && r.Status == event.StatusRunning {
				// Only a process of this test: its AGENT_HOME says so.
				if env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ"); err == nil &&
					strings.Contains(string(env), "AGENT_HOME="+e.Home+"\x00") {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
	})
}

func (s *served) call(t *testing.T, name string, args map[string]any) *sdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*e2etest.Patience) // wait_s is at most Patience here
	defer cancel()
	res, err := s.sess.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		errs, _ := os.ReadFile(s.stderr)
		t.Fatalf("%s %v: %v (a protocol error, not a tool result); server stderr:\n%s", name, args, err, errs)
	}
	return res
}

func texts(res *sdk.CallToolResult) []string {
	var out []string
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			out = append(out, tc.Text)
		}
	}
	return out
}

// ok calls a tool that returns a run and decodes it.
func (s *served) ok(t *testing.T, name string, args map[string]any) mcpserve.Report {
	t.Helper()
	res := s.call(t, name, args)
	if res.IsError {
		t.Fatalf("%s %v: tool error %q", name, args, texts(res))
	}
	var rep mcpserve.Report
	if err := json.Unmarshal([]byte(texts(res)[0]), &rep); err != nil || rep.RunID == "" {
		t.Fatalf("%s: not a run: %q (%v)", name, texts(res), err)
	}
	return rep
}

// toolError calls a tool that must fail with a one-line tool error
// containing want.
func (s *served) toolError(t *testing.T, name string, args map[string]any, want string) {
	t.Helper()
	res := s.call(t, name, args)
	msg := strings.Join(texts(res), "\n")
	t.Logf("%s: %s", name, msg)
	if !res.IsError {
		t.Errorf("%s %v: no tool error, got %q", name, args, msg)
		return
	}
	if !strings.Contains(msg, want) || strings.Contains(msg, "\n") {
		t.Errorf("%s %v: tool error %q, want one line containing %q", name, args, msg, want)
	}
}

// events calls events and returns its lines and page.
func (s *served) events(t *testing.T, args map[string]any) ([]event.Event, mcpserve.EventsPage, string) {
	t.Helper()
	res := s.call(t, "events", args)
	parts := texts(res)
	if res.IsError || len(parts) == 0 {
		t.Fatalf("events %v: %v %q", args, res.IsError, parts)
	}
	var page mcpserve.EventsPage
	data, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(data, &page); err != nil {
		t.Fatal(err)
	}
	var evs []event.Event
	if len(parts) == 2 {
		for _, line := range strings.Split(strings.TrimSuffix(parts[0], "\n"), "\n") {
			var ev event.Event
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatalf("events: line %q is no event: %v", line, err)
			}
			evs = append(evs, ev)
		}
	}
	return evs, page, parts[len(parts)-1]
}

// waitStatus polls status until the run is finished.
func (s *served) waitFinished(t *testing.T, runID string) mcpserve.Report {
	t.Helper()
	var rep mcpserve.Report
	e2etest.WaitFor(t, "run "+runID+" to finish", func() bool {
		rep = s.ok(t, "status", map[string]any{"run_id": runID})
		return rep.Finished
	})
	return rep
}

// waitToolStarted polls events until the run's first tool call started.
func (s *served) waitToolStarted(t *testing.T, runID string) {
	t.Helper()
	e2etest.WaitFor(t, "a tool.started event", func() bool {
		evs, _, _ := s.events(t, map[string]any{"run_id": runID})
		return len(e2etest.OfType(evs, event.ToolStarted)) > 0
	})
}

// runsShow is agent runs show --json.
func runsShow(t *testing.T, e *e2etest.Env, id string) e2etest.RunView {
	t.Helper()
	res := e.Run("runs", "show", id, "--json")
	if res.Code != 0 {
		t.Fatalf("runs show %s: exit %d %s", id, res.Code, res.Stderr)
	}
	var v e2etest.RunView
	if err := json.Unmarshal([]byte(res.Stdout), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func samePath(t *testing.T, a, b string) bool {
	t.Helper()
	ra, err1 := filepath.EvalSymlinks(a)
	rb, err2 := filepath.EvalSymlinks(b)
	return err1 == nil && err2 == nil && ra == rb
}

// TestMCPServeRunWaits: run with wait_s answers with the finished run, which
// is an ordinary run to the CLI; the tools are listed with their schemas.
func TestMCPServeRunWaits(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, llmtest.Turn{Text: "Hello from the model."})
	s := serve(t, e)

	tools, err := s.sess.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
		if schema, _ := json.Marshal(tool.InputSchema); !strings.Contains(string(schema), `"type":"object"`) || tool.Description == "" {
			t.Errorf("tool %s: schema %s, description %q", tool.Name, schema, tool.Description)
		}
	}
	sort.Strings(names)
	if got := strings.Join(names, " "); got != "cancel events harness resume run status" {
		t.Errorf("tools = %s", got)
	}

	rep := s.ok(t, "run", map[string]any{"prompt": "say hello", "wait_s": e2etest.Patience.Seconds()})
	if rep.Status != event.StatusCompleted || !rep.Finished || rep.ExitCode == nil || *rep.ExitCode != 0 ||
		rep.Result != "Hello from the model." || rep.Turns != 1 || rep.Resumable {
		t.Fatalf("run = %+v, want completed with the model's answer", rep)
	}
	if !samePath(t, rep.Workspace, e.Workspace) {
		t.Errorf("workspace = %s, want the server's directory %s", rep.Workspace, e.Workspace)
	}

	list := e.Run("runs", "list", "--json")
	if list.Code != 0 || !strings.Contains(list.Stdout, `"id":"`+rep.RunID+`"`) || !strings.Contains(list.Stdout, `"status":"completed"`) {
		t.Errorf("runs list does not show run %s completed: %s %s", rep.RunID, list.Stdout, list.Stderr)
	}
	if v := runsShow(t, e, rep.RunID[:8]); v.Result != rep.Result || v.Status != rep.Status || v.Kind != "run" {
		t.Errorf("runs show = %s %s %q, want what run answered", v.Kind, v.Status, v.Result)
	}

	if want := filepath.Join(e.Home, "mcp-serve", rep.RunID+".log"); rep.Log != want {
		t.Errorf("log = %s, want %s", rep.Log, want)
	}
	logged, err := os.ReadFile(rep.Log)
	if err != nil {
		t.Fatal(err)
	}
	if evs := e2etest.DecodeEvents(t, string(logged)); evs[0].Type != event.RunStarted || evs[0].RunID != rep.RunID {
		t.Errorf("log starts with %s of %s", evs[0].Type, evs[0].RunID)
	}
}

// TestMCPServeStatusAndEvents: run with wait_s 0 answers while the run is
// running; status follows it to its end; events pages by after_seq.
func TestMCPServeStatusAndEvents(t *testing.T) {
	t.Parallel()
	notes := strings.Repeat("a line of notes\n", 5000) // 80 KB: its events are bigger than an answer
	slow := e2etest.WriteTurn("notes.txt", notes)
	answered := make(chan struct{})
	slow.Gate = answered // the run goes on once run has answered
	e := e2etest.New(t, slow, llmtest.Turn{Text: "Wrote notes.txt."})
	s := serve(t, e)

	rep := s.ok(t, "run", map[string]any{"prompt": "write notes", "wait_s": 0})
	close(answered)
	if rep.Status != event.StatusRunning || rep.Finished || rep.ExitCode != nil || !strings.Contains(rep.Next, "status") {
		t.Fatalf("run with wait_s 0 = %+v, want it running", rep)
	}
	fin := s.waitFinished(t, rep.RunID[:8])
	if fin.Status != event.StatusCompleted || *fin.ExitCode != 0 || fin.Result != "Wrote notes.txt." || fin.Turns != 2 || fin.Usage.PromptTokens == 0 {
		t.Fatalf("status = %+v", fin)
	}
	if data, err := os.ReadFile(filepath.Join(e.Workspace, "notes.txt")); err != nil || string(data) != notes {
		t.Errorf("the run did not write notes.txt: %d bytes, %v", len(data), err)
	}

	first, page, note := s.events(t, map[string]any{"run_id": rep.RunID, "limit": 2})
	if len(first) != 2 || first[0].Type != event.RunStarted || !page.More || page.Count != 2 || page.NextAfterSeq != first[1].Seq ||
		!strings.Contains(note, "after_seq "+strconv.FormatInt(first[1].Seq, 10)) {
		t.Fatalf("events limit 2 = %d events, page %+v, note %q", len(first), page, note)
	}
	// Page on to the end: every answer within its bound, no event twice.
	all := first
	omitted := 0
	for pages := 0; ; pages++ {
		if pages == 20 {
			t.Fatal("paging does not end")
		}
		after := page.NextAfterSeq
		var evs []event.Event
		evs, page, note = s.events(t, map[string]any{"run_id": rep.RunID[:8], "after_seq": after})
		size := 0
		for _, ev := range evs {
			line, _ := json.Marshal(ev)
			size += len(line) + 1
			if ev.RunID != rep.RunID || ev.Seq <= all[len(all)-1].Seq {
				t.Errorf("event %s: run %s seq %d after seq %d", ev.Type, ev.RunID, ev.Seq, all[len(all)-1].Seq)
			}
			if strings.Contains(string(ev.Data), `"omitted_bytes"`) {
				omitted++
			}
			all = append(all, ev)
		}
		if size > mcpserve.EventsMaxBytes || len(evs) == 0 && page.More {
			t.Fatalf("an answer of %d events, %d bytes, more %v", len(evs), size, page.More)
		}
		if !page.More {
			break
		}
		if !strings.Contains(note, "after_seq "+strconv.FormatInt(page.NextAfterSeq, 10)) {
			t.Errorf("note %q does not say how to page on", note)
		}
	}
	if !strings.Contains(note, "no more events") {
		t.Errorf("last note %q", note)
	}
	if last := all[len(all)-1]; last.Type != event.RunCompleted || page.NextAfterSeq != last.Seq {
		t.Errorf("last event %s seq %d, next_after_seq %d", last.Type, last.Seq, page.NextAfterSeq)
	}
	if len(e2etest.OfType(all, event.ToolCompleted)) != 1 || omitted == 0 {
		t.Errorf("%d tool.completed events, %d events too big to send, want 1 and some", len(e2etest.OfType(all, event.ToolCompleted)), omitted)
	}
	db := e.OpenStore(t)
	defer db.Close()
	stored, err := db.ListEvents(context.Background(), rep.RunID, 0, 0)
	if err != nil || len(stored) != len(all) {
		t.Errorf("paged through %d events, the store has %d (%v)", len(all), len(stored), err)
	}
	none, page, _ := s.events(t, map[string]any{"run_id": rep.RunID, "after_seq": page.NextAfterSeq})
	if len(none) != 0 || page.More || page.Count != 0 {
		t.Errorf("events after the end: %d, %+v", len(none), page)
	}
}

// TestMCPServeHarnessPlan: harness with a given plan runs its phases without
// asking; status shows them.
func TestMCPServeHarnessPlan(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, e2etest.WriteTurn("report.md", "# Report\n"), llmtest.Turn{Text: "report.md is written."})
	s := serve(t, e)
	mission := `{"objective":"Write the report","phases":[
		{"id":"write","title":"Write","instructions":"Write report.md.","evidence":{"type":"artifact","artifacts":["report.md"]}}]}`
	rep := s.ok(t, "harness", map[string]any{"plan": mission, "wait_s": e2etest.Patience.Seconds()})
	if rep.Kind != "harness" || rep.Status != event.StatusCompleted || *rep.ExitCode != 0 {
		t.Fatalf("harness = %+v", rep)
	}
	want := []mcpserve.Phase{{ID: "write", Title: "Write", Status: "completed", Attempts: 1}}
	if !e2etest.EqualJSON(t, rep.Phases, want) {
		t.Errorf("phases = %+v, want %+v", rep.Phases, want)
	}
	if st := s.ok(t, "status", map[string]any{"run_id": rep.RunID}); !e2etest.EqualJSON(t, st.Phases, want) {
		t.Errorf("status phases = %+v", st.Phases)
	}
	if v := runsShow(t, e, rep.RunID); v.Kind != "harness" || v.Prompt != "Write the report" {
		t.Errorf("runs show = %s %q", v.Kind, v.Prompt)
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "report.md")); err != nil {
		t.Error(err)
	}
	if left, _ := filepath.Glob(filepath.Join(e.Home, "mcp-serve", "plan-*")); len(left) != 0 {
		t.Errorf("plan files left behind: %v", left)
	}
}

// TestMCPServeToolErrors: bad arguments, unknown run ids and runs in the
// wrong state are one-line tool errors saying what to change; nothing
// starts, and the server goes on.
func TestMCPServeToolErrors(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, llmtest.Turn{Text: "Done."})
	s := serve(t, e)
	file := filepath.Join(e.Workspace, "file.txt")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"status", map[string]any{"run_id": "0123abcd"}, `no run "0123abcd"`},
		{"events", map[string]any{"run_id": "0123abcd"}, `no run "0123abcd"`},
		{"resume", map[string]any{"run_id": "0123abcd"}, `no run "0123abcd"`},
		{"cancel", map[string]any{"run_id": "0123abcd"}, `no run "0123abcd"`},
		{"status", map[string]any{}, "run_id is empty"},
		{"status", map[string]any{"run_id": 12}, "argument run_id must be a string"},
		{"run", map[string]any{}, "run needs a prompt"},
		{"run", map[string]any{"prompt": "x", "workspace": "missing"}, "missing: no such directory"},
		{"run", map[string]any{"prompt": "x", "workspace": file}, "not a directory"},
		{"run", map[string]any{"prompt": "x", "wait_s": -1}, "wait_s -1 is negative"},
		{"run", map[string]any{"prompt": "x", "model": "y"}, `run has no argument "model"; it takes prompt, workspace, wait_s`},
		{"harness", map[string]any{}, "harness needs a request"},
		{"harness", map[string]any{"request": "x", "plan": map[string]any{"objective": "x"}}, "not both"},
		{"harness", map[string]any{"plan": map[string]any{"objective": "x", "phases": []any{}}}, "the plan is not a valid mission.json"},
		{"harness", map[string]any{"plan": 7}, "plan must be a mission.json object"},
		{"events", map[string]any{"run_id": "x", "limit": 0}, "limit 0"},
		{"events", map[string]any{"run_id": "x", "after_seq": 1.5}, "after_seq must be a whole number"},
	} {
		s.toolError(t, tt.tool, tt.args, tt.want)
	}
	if list := e.Run("runs", "list", "--json"); strings.TrimSpace(list.Stdout) != "" {
		t.Errorf("a bad call started a run: %s", list.Stdout)
	}

	done := s.ok(t, "run", map[string]any{"prompt": "finish", "wait_s": e2etest.Patience.Seconds()})
	if done.Status != event.StatusCompleted {
		t.Fatalf("run = %+v", done)
	}
	s.toolError(t, "resume", map[string]any{"run_id": done.RunID}, "is not resumable: it is already completed (agent resume exited 4")
	s.toolError(t, "cancel", map[string]any{"run_id": done.RunID[:8]}, "is not running: it is completed; there is nothing to cancel")
	if _, err := s.sess.ListTools(context.Background(), nil); err != nil {
		t.Errorf("the server did not go on: %v", err)
	}

	// A run whose process fails before it starts: its error, quoted.
	bad := serve(t, e, "OPENAI_BASE_URL=ftp://nowhere")
	bad.toolError(t, "run", map[string]any{"prompt": "x"}, `invalid base URL "ftp://nowhere"`)
	bad.toolError(t, "harness", map[string]any{"request": "x"}, "(agent harness exited 2 before its run started)")
	if left, _ := filepath.Glob(filepath.Join(e.Home, "mcp-serve", "start-*")); len(left) != 0 {
		t.Errorf("logs of runs that never started left behind: %v", left)
	}
}

// TestMCPServeCancel: cancel with mode interrupt stops a run whose tool
// is sleeping, as Ctrl-C would: status says it is interrupted and
// resumable, and resume through the server finishes it. Plain cancel ends
// another for good.
func TestMCPServeCancel(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, e2etest.BashTurn("sleep 600"), llmtest.Turn{Text: "Finished after the cancel."})
	s := serve(t, e)
	rep := s.ok(t, "run", map[string]any{"prompt": "sleep a while", "wait_s": 0})
	s.waitToolStarted(t, rep.RunID)

	began := time.Now()
	c := s.ok(t, "cancel", map[string]any{"run_id": rep.RunID[:8], "mode": "interrupt"})
	if took := time.Since(began); took > e2etest.Patience { // not the sleep's ten minutes
		t.Errorf("cancel took %s", took)
	}
	if c.Status != event.StatusInterrupted || !c.Finished || *c.ExitCode != 130 || !c.Resumable ||
		!strings.Contains(c.Note, "SIGTERM") || !strings.Contains(c.Next, "resume") {
		t.Fatalf("cancel = %+v, want the run interrupted and resumable", c)
	}
	if st := s.ok(t, "status", map[string]any{"run_id": rep.RunID}); st.Status != event.StatusInterrupted || st.Reason != event.ReasonInterrupted {
		t.Errorf("status after cancel = %+v", st)
	}
	if v := runsShow(t, e, rep.RunID); v.Status != event.StatusInterrupted {
		t.Errorf("runs show after cancel: %s", v.Status)
	}
	s.toolError(t, "cancel", map[string]any{"run_id": rep.RunID}, "is not running: it is interrupted")

	fin := s.ok(t, "resume", map[string]any{"run_id": rep.RunID, "wait_s": e2etest.Patience.Seconds()})
	if fin.Status != event.StatusCompleted || fin.Result != "Finished after the cancel." {
		t.Fatalf("resume = %+v", fin)
	}
	if n := e.Srv.RequestCount(); n != 2 {
		t.Errorf("%d model requests, want 2", n)
	}
}

// TestMCPServeRunOutlivesServer: the server's process group is killed while
// its run waits in a tool; the run goes on and completes, and a new server
// reports it.
func TestMCPServeRunOutlivesServer(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, e2etest.BashTurn("while [ ! -e gate ]; do sleep 0.05; done; echo through"), llmtest.Turn{Text: "Through the gate."})
	gate := filepath.Join(e.Workspace, "gate")
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o644) }) // no loop outlives the test
	s := serve(t, e)
	rep := s.ok(t, "run", map[string]any{"prompt": "wait for the gate", "wait_s": 0})
	s.waitToolStarted(t, rep.RunID)

	// Kill the server's whole process group, as a client may when it exits.
	if err := syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = s.sess.Wait() // the connection ends with the server
	if v := runsShow(t, e, rep.RunID); v.Status != event.StatusRunning || v.LeaseHolderGone {
		t.Fatalf("after the server died the run is %s (holder gone %v), want running on", v.Status, v.LeaseHolderGone)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	db := e.OpenStore(t)
	defer db.Close()
	e2etest.WaitFor(t, "the run to complete without its server", func() bool {
		r, err := db.GetRun(context.Background(), rep.RunID)
		return err == nil && r.Status == event.StatusCompleted
	})

	again := serve(t, e)
	if st := again.ok(t, "status", map[string]any{"run_id": rep.RunID}); st.Result != "Through the gate." || *st.ExitCode != 0 {
		t.Errorf("status from a new server = %+v", st)
	}
}

// TestMCPServeResumeAfterCrash: the run's own process is killed; status
// says it is gone and resumable, cancel has nothing to stop, and resume
// through a new server finishes the run.
func TestMCPServeResumeAfterCrash(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, e2etest.BashTurn("while [ ! -e gate ]; do sleep 0.05; done"), llmtest.Turn{Text: "Resumed after the crash."})
	t.Cleanup(func() { _ = os.WriteFile(filepath.Join(e.Workspace, "gate"), nil, 0o644) })
	s := serve(t, e)
	rep := s.ok(t, "run", map[string]any{"prompt": "wait for the gate", "wait_s": 0})
	s.waitToolStarted(t, rep.RunID)

	db := e.OpenStore(t)
	defer db.Close()
	r, err := db.GetRun(context.Background(), rep.RunID)
	if err != nil {
		t.Fatal(err)
	}
	_, pid, ok := store.OwnerProcess(r.LeaseOwner)
	if !ok {
		t.Fatalf("lease owner %q", r.LeaseOwner)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var st mcpserve.Report
	e2etest.WaitFor(t, "status to see the process gone", func() bool {
		st = s.ok(t, "status", map[string]any{"run_id": rep.RunID})
		return st.HolderGone
	})
	if st.Status != event.StatusRunning || !st.Resumable || !strings.Contains(st.Next, "resume") {
		t.Errorf("status of a crashed run = %+v", st)
	}
	if c := s.ok(t, "cancel", map[string]any{"run_id": rep.RunID}); !strings.Contains(c.Note, "already gone") || !c.Resumable {
		t.Errorf("cancel of a crashed run = %+v", c)
	}

	fin := serve(t, e).ok(t, "resume", map[string]any{"run_id": rep.RunID, "wait_s": e2etest.Patience.Seconds()})
	if fin.Status != event.StatusCompleted || fin.Result != "Resumed after the crash." {
		t.Fatalf("resume = %+v", fin)
	}
}

// TestMCPServeCancelForGood: cancel without a mode ends the run
// cancelled; resume refuses it.
func TestMCPServeCancelForGood(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, e2etest.BashTurn("sleep 600"), llmtest.Turn{Text: "never"})
	s := serve(t, e)
	rep := s.ok(t, "run", map[string]any{"prompt": "sleep a while", "wait_s": 0})
	s.waitToolStarted(t, rep.RunID)
	c := s.ok(t, "cancel", map[string]any{"run_id": rep.RunID})
	if c.Status != event.StatusCancelled || c.Resumable || !strings.Contains(c.Note, "SIGUSR1, to cancel it") {
		t.Fatalf("cancel = %+v, want the run cancelled for good", c)
	}
	if v := runsShow(t, e, rep.RunID); v.Status != event.StatusCancelled {
		t.Errorf("runs show after cancel: %s", v.Status)
	}
	s.toolError(t, "resume", map[string]any{"run_id": rep.RunID}, "cancelled")
	s.toolError(t, "cancel", map[string]any{"run_id": "x", "mode": "pause"}, `mode "pause": use cancel (for good) or interrupt (resumable)`)
}
