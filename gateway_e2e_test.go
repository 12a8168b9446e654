package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"agent/event"
	"agent/gateway"
	"agent/gateway/gatewaytest"
	"agent/llm/llmtest"
	"agent/store"
)

const gwToken = "e2e-gateway-token-0123456789"

// inProcessGateway starts a gateway in the test process on e's home; its
// children are real `agent runner` processes (the test binary).
func (e *e2e) inProcessGateway(change func(*gateway.Config)) (*gateway.Server, *store.DB) {
	e.t.Helper()
	db, err := store.Open(filepath.Join(e.home, "agent.db"))
	if err != nil {
		e.t.Fatal(err)
	}
	cfg := gateway.Config{
		Listen: "127.0.0.1:0", Token: gwToken, DB: db, Version: "e2e", DefaultWorkspace: e.workspace, Home: e.home,
		Model:  gateway.ModelDefaults{Name: "test-model", BaseURL: e.srv.URL()},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Env:    append(os.Environ(), "OPENAI_API_KEY=", "AGENT_HOME="+e.home),
	}
	if change != nil {
		change(&cfg)
	}
	srv, err := gateway.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.Stop(ctx); err != nil {
			e.t.Errorf("stop: %v", err)
		}
		db.Close()
	})
	return srv, db
}

func gwDial(t *testing.T, addr string) *gatewaytest.Client {
	t.Helper()
	ctx, cancel := gatewaytest.Timeout(10 * time.Second)
	defer cancel()
	c, err := gatewaytest.Dial(ctx, addr, gatewaytest.Options{Token: gwToken})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func gwCall[T any](t *testing.T, c *gatewaytest.Client, method string, params any) T {
	t.Helper()
	ctx, cancel := gatewaytest.Timeout(20 * time.Second)
	defer cancel()
	var out T
	if err := c.Call(ctx, method, params, &out); err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	return out
}

func gwWait(t *testing.T, c *gatewaytest.Client, runID string) []gateway.EventFrame {
	t.Helper()
	ctx, cancel := gatewaytest.Timeout(30 * time.Second)
	defer cancel()
	evs, err := c.WaitTerminal(ctx, runID)
	if err != nil {
		t.Fatalf("run %s: %v", runID, err)
	}
	var out []gateway.EventFrame
	for _, ev := range evs {
		if ev.RunID == runID {
			out = append(out, ev)
		}
	}
	return out
}

func frameTypes(evs []gateway.EventFrame) string {
	var ts []string
	for _, ev := range evs {
		ts = append(ts, ev.Event)
	}
	return strings.Join(ts, " ")
}

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
		{Text: "Writing it.", ToolCalls: []llmtest.Call{call("write_file", `{"path":"hello.txt","content":"hi\n"}`)}},
		{Text: "Done: hello.txt says hi."},
	}
	fast := newE2E(t, turns...)
	res := fast.run("run", "--json", "write hello.txt")
	if res.code != 0 {
		t.Fatalf("agent run: %d %s", res.code, res.stderr)
	}
	want := decodeEvents(t, res.stdout)

	e := newE2E(t, turns...)
	srv, db := e.inProcessGateway(nil)
	c := gwDial(t, srv.Addr())
	sid := gwCall[gateway.SessionInfo](t, c, gateway.MethodSessionCreate, nil).SessionID
	gwCall[gateway.SessionResumeResult](t, c, gateway.MethodSessionResume, gateway.SessionResumeParams{SessionID: sid})
	run := gwCall[gateway.RunStartResult](t, c, gateway.MethodRunStart, gateway.RunStartParams{SessionID: sid, Input: "write hello.txt"})
	got := gwWait(t, c, run.RunID)
	if frameTypes(got) != eventTypes(want) {
		t.Errorf("gateway stream:\n  %s\nagent run --json:\n  %s", frameTypes(got), eventTypes(want))
	}
	gf, wf := finishedFrame(t, got[len(got)-1]), lastFinished(t, want)
	if gf.Status != wf.Status || gf.Result != wf.Result || gf.Turns != wf.Turns || gf.ExitCode != wf.ExitCode || gf.Reason != wf.Reason || gf.Usage != wf.Usage {
		t.Errorf("gateway end %+v, fast path end %+v", gf, wf)
	}
	if data, err := os.ReadFile(filepath.Join(e.workspace, "hello.txt")); err != nil || string(data) != "hi\n" {
		t.Errorf("hello.txt: %q %v", data, err)
	}
	// The store projected the run like any other: runs show works on it.
	r, err := db.GetRun(context.Background(), run.RunID)
	if err != nil || r.Status != "completed" || r.Turns != 2 || r.SessionID != sid {
		t.Errorf("stored run %+v %v", r, err)
	}
}

func finishedFrame(t *testing.T, ev gateway.EventFrame) event.RunFinishedData {
	t.Helper()
	var d event.RunFinishedData
	if err := json.Unmarshal(ev.Data, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestGatewaySessionMemory: the second run of a session sends the model
// the first run's conversation, as the fake model's request log shows.
func TestGatewaySessionMemory(t *testing.T) {
	t.Parallel()
	e := newE2E(t,
		llmtest.Turn{Text: "Noted: your name is Ada."},
		llmtest.Turn{Text: "Your name is Ada."},
	)
	srv, _ := e.inProcessGateway(nil)
	c := gwDial(t, srv.Addr())
	sid := gwCall[gateway.SessionInfo](t, c, gateway.MethodSessionCreate, nil).SessionID
	gwCall[gateway.SessionResumeResult](t, c, gateway.MethodSessionResume, gateway.SessionResumeParams{SessionID: sid})
	r1 := gwCall[gateway.RunStartResult](t, c, gateway.MethodRunStart, gateway.RunStartParams{SessionID: sid, Input: "My name is Ada."})
	r2 := gwCall[gateway.RunStartResult](t, c, gateway.MethodRunStart, gateway.RunStartParams{SessionID: sid, Input: "What is my name?"})
	gwWait(t, c, r1.RunID)
	if end := finishedFrame(t, lastFrame(gwWait(t, c, r2.RunID))); end.Result != "Your name is Ada." {
		t.Errorf("second run: %+v", end)
	}
	reqs := e.srv.Requests()
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

func lastFrame(evs []gateway.EventFrame) gateway.EventFrame { return evs[len(evs)-1] }

// TestGatewayRunnerCrash: a child that dies without a result fails its
// run with the reason, and the gateway goes on.
func TestGatewayRunnerCrash(t *testing.T) {
	t.Parallel()
	e := newE2E(t, llmtest.Turn{Text: "never asked"})
	wrapper := filepath.Join(t.TempDir(), "dying-runner")
	script := "#!/bin/sh\nread spec\n" +
		`echo '{"v":1,"type":"message.completed","data":{"role":"user","text":"hello"}}'` + "\n" +
		"echo 'wrapper: out of memory' >&2\nexit 7\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	srv, db := e.inProcessGateway(func(c *gateway.Config) { c.Exe = wrapper })
	c := gwDial(t, srv.Addr())
	sid := gwCall[gateway.SessionInfo](t, c, gateway.MethodSessionCreate, nil).SessionID
	gwCall[gateway.SessionResumeResult](t, c, gateway.MethodSessionResume, gateway.SessionResumeParams{SessionID: sid})
	for range 2 {
		run := gwCall[gateway.RunStartResult](t, c, gateway.MethodRunStart, gateway.RunStartParams{SessionID: sid, Input: "hello"})
		evs := gwWait(t, c, run.RunID)
		end := finishedFrame(t, lastFrame(evs))
		if frameTypes(evs) != "run.started message.completed run.failed" || end.ExitCode != 1 ||
			end.Reason != "crashed" || !strings.Contains(end.Detail, "runner exited with status 7 without a result") || !strings.Contains(end.Detail, "out of memory") {
			t.Errorf("%s %+v", frameTypes(evs), end)
		}
		// The lease is released right after the terminal event.
		waitFor(t, "the lease to be released", func() bool {
			r, _ := db.GetRun(context.Background(), run.RunID)
			return r.Status == "failed" && r.LeaseOwner == ""
		})
	}
	d := gwCall[gateway.SessionDetail](t, c, gateway.MethodSessionGet, gateway.SessionParams{SessionID: sid})
	if len(d.Runs) != 2 || d.Session.LastSeq != 6 {
		t.Errorf("session after crashes: %+v", d)
	}
}

// TestGatewayConcurrentRuns: 50 real runs across 10 sessions, a client on
// each session: nothing lost or repeated, seqs strictly increasing, as
// the clients saw them and as the store has them.
func TestGatewayConcurrentRuns(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	e.srv = llmtest.NewServer(t, llmtest.Script{Loop: true, Turns: []llmtest.Turn{{Text: "ok"}}})
	srv, db := e.inProcessGateway(func(c *gateway.Config) { c.MaxConcurrentRuns = 8 })
	type sess struct {
		id   string
		c    *gatewaytest.Client
		runs []string
	}
	var all []*sess
	for range 10 {
		c := gwDial(t, srv.Addr())
		s := &sess{id: gwCall[gateway.SessionInfo](t, c, gateway.MethodSessionCreate, nil).SessionID, c: c}
		gwCall[gateway.SessionResumeResult](t, c, gateway.MethodSessionResume, gateway.SessionResumeParams{SessionID: s.id})
		all = append(all, s)
	}
	starter := gwDial(t, srv.Addr())
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range 50 {
		s := all[i%10]
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := gwCall[gateway.RunStartResult](t, starter, gateway.MethodRunStart, gateway.RunStartParams{SessionID: s.id, Input: fmt.Sprintf("task %d", i)})
			mu.Lock()
			s.runs = append(s.runs, r.RunID)
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, s := range all {
		for _, id := range s.runs {
			if end := finishedFrame(t, lastFrame(gwWait(t, s.c, id))); end.Status != "completed" {
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

// gatewayProc is `agent gateway` as a separate process.
type gatewayProc struct {
	cmd    *exec.Cmd
	addr   string
	stderr string // path of its stderr
	done   chan struct{}
	err    error
}

func (e *e2e) startGateway(args ...string) *gatewayProc {
	e.t.Helper()
	return e.startGatewayWith(nil, args...)
}

// startGatewayWith is startGateway with the command adjusted by change.
func (e *e2e) startGatewayWith(change func(*exec.Cmd), args ...string) *gatewayProc {
	e.t.Helper()
	cmd := e.command(append([]string{"gateway", "--listen", "127.0.0.1:0", "--json"}, args...)...)
	cmd.Env = append(cmd.Env, "AGENT_GATEWAY_TOKEN="+gwToken)
	if change != nil {
		change(cmd)
	}
	g := &gatewayProc{cmd: cmd, stderr: filepath.Join(e.t.TempDir(), "gateway.stderr"), done: make(chan struct{})}
	errf, err := os.Create(g.stderr)
	if err != nil {
		e.t.Fatal(err)
	}
	defer errf.Close()
	cmd.Stderr = errf
	out, err := cmd.StdoutPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() {
		g.err = cmd.Wait()
		close(g.done)
	}()
	e.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-g.done
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		data, _ := os.ReadFile(g.stderr)
		e.t.Fatalf("gateway did not start: %v: %s", err, data)
	}
	var hello struct {
		Listen string `json:"listen"`
	}
	if err := json.Unmarshal([]byte(line), &hello); err != nil || hello.Listen == "" {
		e.t.Fatalf("gateway --json printed %q", line)
	}
	g.addr = hello.Listen
	return g
}

func (g *gatewayProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := g.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

func (g *gatewayProc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-g.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the gateway did not exit")
	}
	if g.cmd.ProcessState == nil {
		t.Fatalf("gateway: %v", g.err)
	}
	return g.cmd.ProcessState.ExitCode()
}

func httpJSON(t *testing.T, method, url, body string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+gwToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %d %s", method, url, resp.StatusCode, data)
		}
	}
	return resp.StatusCode
}

// sseEvents reads a run's SSE stream to its end (the run's last event).
func sseEvents(t *testing.T, addr, runID string, after int64) []event.Event {
	t.Helper()
	req, _ := http.NewRequest("GET", fmt.Sprintf("http://%s/v1/runs/%s/events?after_seq=%d", addr, runID, after), nil)
	req.Header.Set("Authorization", "Bearer "+gwToken)
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
			e := newE2E(t,
				llmtest.Turn{Text: "Starting the long step.", ToolCalls: []llmtest.Call{
					call("write_file", `{"path":"notes.md","content":"draft 1\n"}`),
					call("bash", `{"command":"echo ran >> count.txt; `+markThenSleep+`"}`)}},
				llmtest.Turn{ToolCalls: []llmtest.Call{call("write_file", `{"path":"notes.md","content":"draft 2\n"}`)}},
				llmtest.Turn{Text: "The long step was interrupted; done anyway."},
			)
			g := e.startGateway()
			var run gateway.RunStartResult
			if code := httpJSON(t, "POST", "http://"+g.addr+"/v1/runs", `{"input":"run the long step"}`, &run); code != 202 {
				t.Fatalf("POST /v1/runs: %d", code)
			}
			waitFor(t, "the tool to start", func() bool {
				data, err := os.ReadFile(filepath.Join(e.workspace, "started"))
				return err == nil && strings.HasSuffix(string(data), "\n")
			})
			g.signal(t, syscall.SIGKILL)
			g.wait(t)

			g2 := e.startGateway("--reclaim", policy)
			evs := sseEvents(t, g2.addr, run.RunID, 0)
			last := evs[len(evs)-1]
			var fin event.RunFinishedData
			last.Decode(&fin)
			var d gateway.RunDetail
			httpJSON(t, "GET", "http://"+g2.addr+"/v1/runs/"+run.RunID, "", &d)
			switch policy {
			case "resume":
				if last.Type != "run.completed" || fin.Result != "The long step was interrupted; done anyway." || d.Run.Reclaims != 1 {
					t.Errorf("resumed run: %s %+v, reclaims %d; events %s", last.Type, fin, d.Run.Reclaims, eventTypes(evs))
				}
				if !strings.Contains(eventTypes(evs), "tool.started warning run.started") {
					t.Errorf("events: %s", eventTypes(evs))
				}
				if n := countLines(t, filepath.Join(e.workspace, "count.txt")); n != 1 {
					t.Errorf("the interrupted bash call ran %d times", n)
				}
				if n := strings.Count(eventTypes(evs), "checkpoint.created"); n != 1 {
					t.Errorf("notes.md was checkpointed %d times; its first checkpoint must stay its state before the run", n)
				}
				if e.srv.RequestCount() != 3 {
					t.Errorf("%d model requests", e.srv.RequestCount())
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
// start resumes the long run to completion.
func TestGatewaySIGTERMDrain(t *testing.T) {
	t.Parallel()
	e := newE2E(t,
		llmtest.Turn{When: "SHORT", Text: "short done", DelayMS: 1500},
		llmtest.Turn{When: "LONG", Text: "Long step.", ToolCalls: []llmtest.Call{call("bash", `{"command":"`+markThenSleep+`"}`)}},
		llmtest.Turn{When: "LONG", Text: "long done after the restart"},
	)
	g := e.startGateway("--drain-grace", "3s")
	var long, short gateway.RunStartResult
	httpJSON(t, "POST", "http://"+g.addr+"/v1/runs", `{"input":"LONG task"}`, &long)
	waitFor(t, "the long tool to start", func() bool {
		data, err := os.ReadFile(filepath.Join(e.workspace, "started"))
		return err == nil && strings.HasSuffix(string(data), "\n")
	})
	httpJSON(t, "POST", "http://"+g.addr+"/v1/runs", `{"input":"SHORT task"}`, &short)
	waitFor(t, "the short run's model call", func() bool { return e.srv.RequestCount() == 2 })
	g.signal(t, syscall.SIGTERM)
	if code := g.wait(t); code != 0 {
		data, _ := os.ReadFile(g.stderr)
		t.Fatalf("gateway exit %d after SIGTERM: %s", code, data)
	}
	db, err := store.Open(filepath.Join(e.home, "agent.db"))
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

	g2 := e.startGateway()
	evs := sseEvents(t, g2.addr, long.RunID, 0)
	if last := evs[len(evs)-1]; last.Type != "run.completed" || !strings.Contains(eventTypes(evs), "run.interrupted warning run.started") {
		t.Errorf("resumed long run: %s", eventTypes(evs))
	}
}

// TestGatewayCommand: the token file, the refusals, the listening line.
func TestGatewayCommand(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	cmd := e.command("gateway", "--listen", "127.0.0.1:0")
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stderr).ReadString('\n')
	tokenPath := filepath.Join(e.home, "gateway.token")
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
	res := e.run("gateway", "--listen", "127.0.0.1:0")
	if res.code != 2 || !strings.Contains(res.stderr, "chmod 600 "+tokenPath) {
		t.Errorf("readable token file: %d %s", res.code, res.stderr)
	}
	os.Chmod(tokenPath, 0o600)
	res = e.run("gateway", "--listen", "0.0.0.0:0")
	if res.code != 2 || !strings.Contains(res.stderr, "--allow-remote") {
		t.Errorf("non-loopback listen: %d %s", res.code, res.stderr)
	}
	res = e.run("gateway", "--reclaim", "maybe")
	if res.code != 2 || !strings.Contains(res.stderr, "resume or fail") {
		t.Errorf("bad --reclaim: %d %s", res.code, res.stderr)
	}
	// An address in use is the environment's doing: exit 5, naming it.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	res = e.run("gateway", "--listen", taken.Addr().String())
	if res.code != 5 || !strings.Contains(res.stderr, "cannot listen on "+taken.Addr().String()) || !strings.Contains(res.stderr, "address already in use") ||
		strings.Count(strings.TrimSpace(res.stderr), "\n") != 0 {
		t.Errorf("address in use: %d %q", res.code, res.stderr)
	}
	res = e.run("gateway", "--help")
	if res.code != 0 || !strings.Contains(res.stdout, "--drain-grace") || !strings.Contains(res.stdout, "always refused") {
		t.Errorf("help: %d %s", res.code, res.stdout)
	}
}

// TestGatewayHarness: options.harness plans and runs phases inside the
// gateway, streaming the harness events, like `agent harness --json`.
func TestGatewayHarness(t *testing.T) {
	t.Parallel()
	planArgs := json.RawMessage(`{"objective":"A greeting","phases":[
		{"id":"greet","title":"Greet","instructions":"Write hello.txt.","evidence":{"type":"artifact","artifacts":["hello.txt"]}}]}`)
	turns := []llmtest.Turn{{When: plannerMarker, ToolCalls: []llmtest.Call{{Name: "submit_plan", Arguments: planArgs}}}}
	turns = append(turns, forPhase("greet", writeTurn("hello.txt", "hello\n"), llmtest.Turn{Text: "hello.txt says hello."})...)
	e := newE2E(t, turns...)
	srv, _ := e.inProcessGateway(nil)
	c := gwDial(t, srv.Addr())
	sid := gwCall[gateway.SessionInfo](t, c, gateway.MethodSessionCreate, nil).SessionID
	gwCall[gateway.SessionResumeResult](t, c, gateway.MethodSessionResume, gateway.SessionResumeParams{SessionID: sid})
	run := gwCall[gateway.RunStartResult](t, c, gateway.MethodRunStart, gateway.RunStartParams{
		SessionID: sid, Input: "write a greeting", Options: gateway.RunOptions{Harness: true}})
	evs := gwWait(t, c, run.RunID)
	end := finishedFrame(t, lastFrame(evs))
	if lastFrame(evs).Event != "run.completed" || end.Reason != "completed" || end.Detail != "every phase verified" || end.Result != "hello.txt says hello." {
		t.Fatalf("harness run: %s %+v", frameTypes(evs), end)
	}
	for _, typ := range []string{"plan.created", "phase.started", "verification.completed", "phase.completed"} {
		if !strings.Contains(frameTypes(evs), typ) {
			t.Errorf("no %s in %s", typ, frameTypes(evs))
		}
	}
	if _, err := os.Stat(filepath.Join(e.workspace, ".agent", "runs", run.RunID, "mission.json")); err != nil {
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
	e := newE2E(t,
		// Whole arguments in one chunk: the fake model is not what this measures.
		llmtest.Turn{ToolCalls: []llmtest.Call{{Name: "write_file", Arguments: args}}, Quirks: []string{llmtest.QuirkWholeArgs}},
		llmtest.Turn{Text: "Wrote it."},
	)
	srv, db := e.inProcessGateway(nil)
	c := gwDial(t, srv.Addr())
	sid := gwCall[gateway.SessionInfo](t, c, gateway.MethodSessionCreate, nil).SessionID
	run := gwCall[gateway.RunStartResult](t, c, gateway.MethodRunStart, gateway.RunStartParams{SessionID: sid, Input: "write a big file"})
	// 9 MB through JSON, SQLite and the race detector several times over.
	ctx, cancel := gatewaytest.Timeout(2 * time.Minute)
	defer cancel()
	evs, err := c.WaitTerminal(ctx, run.RunID)
	if err != nil {
		t.Fatalf("run %s: %v", run.RunID, err)
	}
	if got := frameTypes(evs); !strings.Contains(got, "message.completed tool.started checkpoint.created tool.completed artifact.created") ||
		!strings.HasSuffix(got, "run.completed") || strings.Contains(got, "warning") {
		t.Fatalf("events: %s", got)
	}
	if fi, err := os.Stat(filepath.Join(e.workspace, "big.txt")); err != nil || fi.Size() != int64(len(content)) {
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
