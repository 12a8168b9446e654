package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/gateway"
	"agent/gateway/api"
	"agent/gateway/gatewaytest"
	"agent/llm/llmtest"
	"agent/store"
)

func eventTypes(evs []event.Event) string {
	var ts []string
	for _, ev := range evs {
		ts = append(ts, ev.Type)
	}
	return strings.Join(ts, " ")
}

// TestGatewayRunLikeFastPath: a gateway run's stream has the types, in
// the order, of `agent run --json` for the same task and model replies.
func TestGatewayRunLikeFastPath(t *testing.T) {
	t.Parallel()
	turns := []llmtest.Turn{
		{Text: "Writing it.", ToolCalls: []llmtest.Call{e2etest.ToolCall("write_file", `{"path":"hello.txt","content":"hi\n"}`)}},
		{Text: "Done: hello.txt says hi."},
	}
	fast := e2etest.New(t, turns...)
	res := fast.Run("run", "--json", "write hello.txt")
	if res.Code != 0 {
		t.Fatalf("agent run: %d %s", res.Code, res.Stderr)
	}
	want := e2etest.DecodeEvents(t, res.Stdout)

	e := e2etest.New(t, turns...)
	srv, db := e.InProcessGateway(nil)
	c := e2etest.GwDial(t, srv.Addr())
	sid := e2etest.GwCall[api.SessionInfo](t, c, api.MethodSessionCreate, nil).SessionID
	e2etest.GwCall[api.SessionResumeResult](t, c, api.MethodSessionResume, api.SessionResumeParams{SessionID: sid})
	// The same options: agent run --json offers no ask_human (nobody at a
	// terminal), which a gateway session does unless told.
	run := e2etest.GwCall[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "write hello.txt",
		Options: api.RunOptions{AskHuman: new(false)}})
	got := e2etest.GwWait(t, c, run.RunID)
	if e2etest.FrameTypes(got) != eventTypes(want) {
		t.Errorf("gateway stream:\n  %s\nagent run --json:\n  %s", e2etest.FrameTypes(got), eventTypes(want))
	}
	gf, wf := e2etest.FinishedFrame(t, got[len(got)-1]), e2etest.LastFinished(t, want)
	if gf.Status != wf.Status || gf.Result != wf.Result || gf.Turns != wf.Turns || gf.ExitCode != wf.ExitCode || gf.Reason != wf.Reason || gf.Usage != wf.Usage {
		t.Errorf("gateway end %+v, fast path end %+v", gf, wf)
	}
	if data, err := os.ReadFile(filepath.Join(e.Workspace, "hello.txt")); err != nil || string(data) != "hi\n" {
		t.Errorf("hello.txt: %q %v", data, err)
	}
	// The store projected the run like any other: runs show works on it.
	r, err := db.GetRun(context.Background(), run.RunID)
	if err != nil || r.Status != "completed" || r.Turns != 2 || r.SessionID != sid {
		t.Errorf("stored run %+v %v", r, err)
	}
}

// TestGatewaySessionMemory: the second run of a session sends the model
// the first run's conversation, as the fake model's request log shows.
func TestGatewaySessionMemory(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{Text: "Noted: your name is Ada."},
		llmtest.Turn{Text: "Your name is Ada."},
	)
	srv, _ := e.InProcessGateway(nil)
	c := e2etest.GwDial(t, srv.Addr())
	sid := e2etest.GwCall[api.SessionInfo](t, c, api.MethodSessionCreate, nil).SessionID
	e2etest.GwCall[api.SessionResumeResult](t, c, api.MethodSessionResume, api.SessionResumeParams{SessionID: sid})
	r1 := e2etest.GwCall[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "My name is Ada."})
	r2 := e2etest.GwCall[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "What is my name?"})
	e2etest.GwWait(t, c, r1.RunID)
	if end := e2etest.FinishedFrame(t, e2etest.LastFrame(e2etest.GwWait(t, c, r2.RunID))); end.Result != "Your name is Ada." {
		t.Errorf("second run: %+v", end)
	}
	reqs := e.Srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests", len(reqs))
	}
	var conv []string
	for _, m := range reqs[1].Messages() {
		if m.Role != "system" {
			conv = append(conv, m.Role+": "+m.Content)
		}
	}
	if got := strings.Join(conv, " | "); got != "user: My name is Ada. | assistant: Noted: your name is Ada. | user: What is my name?" {
		t.Errorf("second run's request: %s", got)
	}
}

// TestGatewayRunnerCrash: a child that dies without a result fails its
// run with the reason, and the gateway goes on.
func TestGatewayRunnerCrash(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, llmtest.Turn{Text: "never asked"})
	wrapper := filepath.Join(t.TempDir(), "dying-runner")
	script := "#!/bin/sh\nread spec\n" +
		`echo '{"v":1,"type":"message.completed","data":{"role":"user","text":"hello"}}'` + "\n" +
		"echo 'wrapper: out of memory' >&2\nexit 7\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	srv, db := e.InProcessGateway(func(c *gateway.Config) { c.Exe = wrapper })
	c := e2etest.GwDial(t, srv.Addr())
	sid := e2etest.GwCall[api.SessionInfo](t, c, api.MethodSessionCreate, nil).SessionID
	e2etest.GwCall[api.SessionResumeResult](t, c, api.MethodSessionResume, api.SessionResumeParams{SessionID: sid})
	for range 2 {
		run := e2etest.GwCall[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "hello"})
		evs := e2etest.GwWait(t, c, run.RunID)
		end := e2etest.FinishedFrame(t, e2etest.LastFrame(evs))
		if e2etest.FrameTypes(evs) != "run.started message.completed run.failed" || end.ExitCode != 1 ||
			end.Reason != "crashed" || !strings.Contains(end.Detail, "runner exited with status 7 without a result") || !strings.Contains(end.Detail, "out of memory") {
			t.Errorf("%s %+v", e2etest.FrameTypes(evs), end)
		}
		// The lease is released right after the terminal event.
		e2etest.WaitFor(t, "the lease to be released", func() bool {
			r, _ := db.GetRun(context.Background(), run.RunID)
			return r.Status == "failed" && r.LeaseOwner == ""
		})
	}
	d := e2etest.GwCall[api.SessionDetail](t, c, api.MethodSessionGet, api.SessionParams{SessionID: sid})
	if len(d.Runs) != 2 || d.Session.LastSeq != 6 {
		t.Errorf("session after crashes: %+v", d)
	}
}

// TestGatewayConcurrentRuns: 50 real runs across 10 sessions, a client on
// each session: nothing lost or repeated, seqs strictly increasing, as
// the clients saw them and as the store has them.
func TestGatewayConcurrentRuns(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t)
	e.Srv = llmtest.NewServer(t, llmtest.Script{Loop: true, Turns: []llmtest.Turn{{Text: "ok"}}})
	srv, db := e.InProcessGateway(func(c *gateway.Config) { c.MaxConcurrentRuns = 8 })
	type sess struct {
		id   string
		c    *gatewaytest.Client
		runs []string
	}
	var all []*sess
	for range 10 {
		c := e2etest.GwDial(t, srv.Addr())
		s := &sess{id: e2etest.GwCall[api.SessionInfo](t, c, api.MethodSessionCreate, nil).SessionID, c: c}
		e2etest.GwCall[api.SessionResumeResult](t, c, api.MethodSessionResume, api.SessionResumeParams{SessionID: s.id})
		all = append(all, s)
	}
	starter := e2etest.GwDial(t, srv.Addr())
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range 50 {
		s := all[i%10]
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := e2etest.GwCall[api.RunStartResult](t, starter, api.MethodRunStart, api.RunStartParams{SessionID: s.id, Input: fmt.Sprintf("task %d", i)})
			mu.Lock()
			s.runs = append(s.runs, r.RunID)
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, s := range all {
		for _, id := range s.runs {
			if end := e2etest.FinishedFrame(t, e2etest.LastFrame(e2etest.GwWait(t, s.c, id))); end.Status != "completed" {
				t.Errorf("run %s: %+v", id, end)
			}
		}
		seen := s.c.Events()
		stored, err := db.ListSessionEvents(context.Background(), s.id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(seen) != len(stored) {
			t.Fatalf("session %s: client saw %d events, store has %d", s.id, len(seen), len(stored))
		}
		perRun := map[string]int{}
		for i, ev := range seen {
			if ev.Seq != int64(i+1) || stored[i].Seq != ev.Seq || stored[i].RunID != ev.RunID || stored[i].Type != ev.Event {
				t.Fatalf("session %s: event %d is seq %d %s, stored seq %d %s", s.id, i, ev.Seq, ev.Event, stored[i].Seq, stored[i].Type)
			}
			if gatewaytest.IsTerminal(ev.Event) {
				perRun[ev.RunID]++
			}
		}
		if len(perRun) != 5 {
			t.Errorf("session %s: %d runs ended, want 5", s.id, len(perRun))
		}
		for id, n := range perRun {
			if n != 1 {
				t.Errorf("run %s has %d terminal events", id, n)
			}
		}
	}
}

// sseEvents reads a run's SSE stream to its end (the run's last event).
func sseEvents(t *testing.T, addr, runID string, after int64) []event.Event {
	t.Helper()
	req, _ := http.NewRequest("GET", fmt.Sprintf("http://%s/v1/runs/%s/events?after_seq=%d", addr, runID, after), nil)
	req.Header.Set("Authorization", "Bearer "+e2etest.GwToken)
	client := &http.Client{Timeout: 60 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var evs []event.Event
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, event.MaxLine)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var ev event.Event
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				t.Fatalf("SSE data %q: %v", data, err)
			}
			evs = append(evs, ev)
		}
	}
	return evs
}

// TestGatewayKill9Reclaim kills the gateway process with SIGKILL while a
// run's tool is running, then starts it again: with --reclaim resume the
// run continues (the interrupted call is not repeated, a file it already
// checkpointed is not checkpointed again) and completes; with --reclaim
// fail it is recorded failed with the reason.
func TestGatewayKill9Reclaim(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"resume", "fail"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			e := e2etest.New(t,
				llmtest.Turn{Text: "Starting the long step.", ToolCalls: []llmtest.Call{
					e2etest.ToolCall("write_file", `{"path":"notes.md","content":"draft 1\n"}`),
					e2etest.ToolCall("bash", `{"command":"echo ran >> count.txt; `+e2etest.MarkThenSleep+`"}`)}},
				llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("write_file", `{"path":"notes.md","content":"draft 2\n"}`)}},
				llmtest.Turn{Text: "The long step was interrupted; done anyway."},
			)
			g := e.StartGateway()
			var run api.RunStartResult
			if code := e2etest.HTTPJSON(t, "POST", "http://"+g.Addr+"/v1/runs", `{"input":"run the long step"}`, &run); code != 202 {
				t.Fatalf("POST /v1/runs: %d", code)
			}
			e2etest.WaitFor(t, "the tool to start", func() bool {
				data, err := os.ReadFile(filepath.Join(e.Workspace, "started"))
				return err == nil && strings.HasSuffix(string(data), "\n")
			})
			g.Signal(t, syscall.SIGKILL)
			g.Wait(t)

			g2 := e.StartGateway("--reclaim", policy)
			evs := sseEvents(t, g2.Addr, run.RunID, 0)
			last := evs[len(evs)-1]
			var fin event.RunFinishedData
			last.Decode(&fin)
			var d api.RunDetail
			e2etest.HTTPJSON(t, "GET", "http://"+g2.Addr+"/v1/runs/"+run.RunID, "", &d)
			switch policy {
			case "resume":
				if last.Type != "run.completed" || fin.Result != "The long step was interrupted; done anyway." || d.Run.Reclaims != 1 {
					t.Errorf("resumed run: %s %+v, reclaims %d; events %s", last.Type, fin, d.Run.Reclaims, eventTypes(evs))
				}
				if !strings.Contains(eventTypes(evs), "tool.started warning run.started") {
					t.Errorf("events: %s", eventTypes(evs))
				}
				if n := e2etest.CountLines(t, filepath.Join(e.Workspace, "count.txt")); n != 1 {
					t.Errorf("the interrupted bash call ran %d times", n)
				}
				if n := strings.Count(eventTypes(evs), "checkpoint.created"); n != 1 {
					t.Errorf("notes.md was checkpointed %d times; its first checkpoint must stay its state before the run", n)
				}
				if e.Srv.RequestCount() != 3 {
					t.Errorf("%d model requests", e.Srv.RequestCount())
				}
			case "fail":
				if last.Type != "run.failed" || fin.Reason != "crashed" || !strings.Contains(fin.Detail, "not resumed (reclaim policy fail)") || fin.ExitCode != 1 {
					t.Errorf("failed run: %s %+v", last.Type, fin)
				}
			}
			for i := 1; i < len(evs); i++ {
				if evs[i].Seq <= evs[i-1].Seq {
					t.Fatalf("seq %d after %d", evs[i].Seq, evs[i-1].Seq)
				}
			}
		})
	}
}

// TestGatewaySIGTERMDrain: SIGTERM lets a short run finish and records a
// long one interrupted and resumable; the gateway exits 0, and the next
// start resumes the long run to completion. The short run's model
// answers once the drain has begun, and the drain grace leaves a loaded
// machine many seconds to finish it (the long run waits all of them).
func TestGatewaySIGTERMDrain(t *testing.T) {
	t.Parallel()
	answer := make(chan struct{})
	e := e2etest.New(t,
		llmtest.Turn{When: "SHORT", Text: "short done", Gate: answer},
		llmtest.Turn{When: "LONG", Text: "Long step.", ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", `{"command":"`+e2etest.MarkThenSleep+`"}`)}},
		llmtest.Turn{When: "LONG", Text: "long done after the restart"},
	)
	g := e.StartGateway("--drain-grace", "15s")
	var long, short api.RunStartResult
	e2etest.HTTPJSON(t, "POST", "http://"+g.Addr+"/v1/runs", `{"input":"LONG task"}`, &long)
	e2etest.WaitFor(t, "the long tool to start", func() bool {
		data, err := os.ReadFile(filepath.Join(e.Workspace, "started"))
		return err == nil && strings.HasSuffix(string(data), "\n")
	})
	e2etest.HTTPJSON(t, "POST", "http://"+g.Addr+"/v1/runs", `{"input":"SHORT task"}`, &short)
	e2etest.WaitFor(t, "the short run's model call", func() bool { return e.Srv.RequestCount() == 2 })
	g.Signal(t, syscall.SIGTERM)
	e2etest.WaitFor(t, "the drain to begin", func() bool {
		data, _ := os.ReadFile(g.Stderr)
		return strings.Contains(string(data), "gateway stopping")
	})
	close(answer)
	if code := g.Wait(t); code != 0 {
		data, _ := os.ReadFile(g.Stderr)
		t.Fatalf("gateway exit %d after SIGTERM: %s", code, data)
	}
	db, err := store.Open(filepath.Join(e.Home, "agent.db"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, _ := db.GetRun(ctx, short.RunID)
	l, _ := db.GetRun(ctx, long.RunID)
	db.Close()
	if s.Status != "completed" || s.Result != "short done" {
		t.Errorf("short run after the drain: %s %q", s.Status, s.Reason)
	}
	if l.Status != "interrupted" || l.Reason != "interrupted" || l.Detail != "gateway stopped; resumable" || l.ExitCode != 130 || l.LeaseOwner != "" {
		t.Errorf("long run after the drain: %s %q %q exit %d lease %q", l.Status, l.Reason, l.Detail, l.ExitCode, l.LeaseOwner)
	}

	g2 := e.StartGateway()
	evs := sseEvents(t, g2.Addr, long.RunID, 0)
	if last := evs[len(evs)-1]; last.Type != "run.completed" || !strings.Contains(eventTypes(evs), "run.interrupted warning run.started") {
		t.Errorf("resumed long run: %s", eventTypes(evs))
	}
}

// TestGatewayCommand: the token file, the refusals, the listening line.
func TestGatewayCommand(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t)
	cmd := e.Command("gateway", "--listen", "127.0.0.1:0")
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stderr).ReadString('\n')
	tokenPath := filepath.Join(e.Home, "gateway.token")
	if !strings.HasPrefix(line, "agent gateway listening on http://127.0.0.1:") || !strings.Contains(line, "(token: "+tokenPath+")") {
		t.Errorf("first line: %q", line)
	}
	st, err := os.Stat(tokenPath)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", st, err)
	}
	data, _ := os.ReadFile(tokenPath)
	if len(strings.TrimSpace(string(data))) != 64 {
		t.Errorf("token %q is not 32 bytes of hex", data)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}

	if err := os.Chmod(tokenPath, 0o644); err != nil {
		t.Fatal(err)
	}
	res := e.Run("gateway", "--listen", "127.0.0.1:0")
	if res.Code != 2 || !strings.Contains(res.Stderr, "chmod 600 "+tokenPath) {
		t.Errorf("readable token file: %d %s", res.Code, res.Stderr)
	}
	os.Chmod(tokenPath, 0o600)
	res = e.Run("gateway", "--listen", "0.0.0.0:0")
	if res.Code != 2 || !strings.Contains(res.Stderr, "--allow-remote") {
		t.Errorf("non-loopback listen: %d %s", res.Code, res.Stderr)
	}
	res = e.Run("gateway", "--reclaim", "maybe")
	if res.Code != 2 || !strings.Contains(res.Stderr, "resume or fail") {
		t.Errorf("bad --reclaim: %d %s", res.Code, res.Stderr)
	}
	// An address in use is the environment's doing: exit 5, naming it.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	res = e.Run("gateway", "--listen", taken.Addr().String())
	if res.Code != 5 || !strings.Contains(res.Stderr, "cannot listen on "+taken.Addr().String()) || !strings.Contains(res.Stderr, "address already in use") ||
		strings.Count(strings.TrimSpace(res.Stderr), "\n") != 0 {
		t.Errorf("address in use: %d %q", res.Code, res.Stderr)
	}
	res = e.Run("gateway", "--help")
	if res.Code != 0 || !strings.Contains(res.Stdout, "--drain-grace") || !strings.Contains(res.Stdout, "always refused") {
		t.Errorf("help: %d %s", res.Code, res.Stdout)
	}
}

// TestGatewayHarness: options.harness plans and runs phases inside the
// gateway, streaming the harness events, like `agent harness --json`.
func TestGatewayHarness(t *testing.T) {
	t.Parallel()
	planArgs := json.RawMessage(`{"objective":"A greeting","phases":[
		{"id":"greet","title":"Greet","instructions":"Write hello.txt.","evidence":{"type":"artifact","artifacts":["hello.txt"]}}]}`)
	turns := []llmtest.Turn{{When: e2etest.PlannerMarker, ToolCalls: []llmtest.Call{{Name: "submit_plan", Arguments: planArgs}}}}
	turns = append(turns, e2etest.ForPhase("greet", e2etest.WriteTurn("hello.txt", "hello\n"), llmtest.Turn{Text: "hello.txt says hello."})...)
	e := e2etest.New(t, turns...)
	srv, _ := e.InProcessGateway(nil)
	c := e2etest.GwDial(t, srv.Addr())
	sid := e2etest.GwCall[api.SessionInfo](t, c, api.MethodSessionCreate, nil).SessionID
	e2etest.GwCall[api.SessionResumeResult](t, c, api.MethodSessionResume, api.SessionResumeParams{SessionID: sid})
	run := e2etest.GwCall[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{
		SessionID: sid, Input: "write a greeting", Options: api.RunOptions{Harness: true}})
	evs := e2etest.GwWait(t, c, run.RunID)
	end := e2etest.FinishedFrame(t, e2etest.LastFrame(evs))
	if e2etest.LastFrame(evs).Event != "run.completed" || end.Reason != "completed" || end.Detail != "every phase verified" || end.Result != "hello.txt says hello." {
		t.Fatalf("harness run: %s %+v", e2etest.FrameTypes(evs), end)
	}
	for _, typ := range []string{"plan.created", "phase.started", "verification.completed", "phase.completed"} {
		if !strings.Contains(e2etest.FrameTypes(evs), typ) {
			t.Errorf("no %s in %s", typ, e2etest.FrameTypes(evs))
		}
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, ".agent", "runs", run.RunID, "mission.json")); err != nil {
		t.Errorf("run dir: %v", err)
	}
}

// TestGatewayLargeToolCall: a 9 MB write_file in a runner child arrives
// whole, its assistant message and tool.started included: data too large
// for an event line travels through the blob store.
func TestGatewayLargeToolCall(t *testing.T) {
	t.Parallel()
	content := strings.Repeat("0123456789abcdef\n", (9<<20)/17) // past the 8 MB line limit
	args, _ := json.Marshal(map[string]string{"path": "big.txt", "content": content})
	e := e2etest.New(t,
		// Whole arguments in one chunk: the fake model is not what this measures.
		llmtest.Turn{ToolCalls: []llmtest.Call{{Name: "write_file", Arguments: args}}, Quirks: []string{llmtest.QuirkWholeArgs}},
		llmtest.Turn{Text: "Wrote it."},
	)
	srv, db := e.InProcessGateway(nil)
	c := e2etest.GwDial(t, srv.Addr())
	sid := e2etest.GwCall[api.SessionInfo](t, c, api.MethodSessionCreate, nil).SessionID
	run := e2etest.GwCall[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "write a big file"})
	// 9 MB through JSON, SQLite and the race detector several times over:
	// minutes of CPU on a loaded machine.
	ctx, cancel := gatewaytest.Timeout(6 * time.Minute)
	defer cancel()
	evs, err := c.WaitTerminal(ctx, run.RunID)
	if err != nil {
		t.Fatalf("run %s: %v", run.RunID, err)
	}
	if got := e2etest.FrameTypes(evs); !strings.Contains(got, "message.completed tool.started checkpoint.created tool.completed artifact.created") ||
		!strings.HasSuffix(got, "run.completed") || strings.Contains(got, "warning") {
		t.Fatalf("events: %s", got)
	}
	if fi, err := os.Stat(filepath.Join(e.Workspace, "big.txt")); err != nil || fi.Size() != int64(len(content)) {
		t.Fatalf("big.txt: %v %v", fi, err)
	}
	stored, err := db.ListEvents(context.Background(), run.RunID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range stored {
		if ev.Type == event.ToolStarted {
			var d event.ToolStartedData
			if err := ev.Decode(&d); err != nil || len(d.Args) < len(content) {
				t.Errorf("stored tool.started has %d bytes of arguments (%v), want the whole call", len(d.Args), err)
			}
			return
		}
	}
	t.Error("no tool.started stored")
}
