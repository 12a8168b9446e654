package model

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/gateway/api"
	"agent/gateway/gatewaytest"
	"agent/llm/llmtest"
	"agent/scheduler"
	"agent/store"
	"agent/supervisor"
)

// compactionReply answers the agent's compaction requests, which say
// they are compacting a conversation.
var compactionReply = llmtest.Turn{When: "You are compacting the conversation", Text: "SUMMARY: the agent read the big files in order and noted each one's marker."}

// bigFiles writes n files of size bytes each, big-1.txt … big-n.txt, and
// returns the turns that read them one by one, then a final answer.
func bigFiles(t *testing.T, dir string, n, size int) []llmtest.Turn {
	t.Helper()
	var turns []llmtest.Turn
	for i := 1; i <= n; i++ {
		body := fmt.Sprintf("marker %d\n%s\n", i, strings.Repeat("x", size))
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("big-%d.txt", i)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		turns = append(turns, llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("read_file", fmt.Sprintf(`{"path":"big-%d.txt"}`, i))}})
	}
	return append(turns, llmtest.Turn{Text: "Read them all."})
}

func compactions(evs []event.Event) []event.ContextCompactedData {
	var out []event.ContextCompactedData
	for _, ev := range e2etest.OfType(evs, event.ContextCompacted) {
		var d event.ContextCompactedData
		ev.Decode(&d)
		out = append(out, d)
	}
	return out
}

// A 60-turn run with large tool outputs against a model that refuses
// requests past its context window: it completes by compacting, every
// request it got answered fit, and a kill -9 halfway then resume goes on
// from the compacted conversation.
func TestCompactionLongRunSurvivesKill(t *testing.T) {
	t.Parallel()
	const limit = 24_000 // bytes of request the fake model accepts
	e := e2etest.New(t)
	turns := bigFiles(t, e.Workspace, 60, 2500)
	e.Srv = llmtest.NewServer(t, llmtest.Script{Turns: turns, MaxRequestBytes: limit, ContextError: "vllm",
		Standing: []llmtest.Turn{compactionReply}})

	b := e.Start("run", "--json", "read the big files one by one")
	runID := b.WaitEvent(t, event.RunStarted).RunID
	e2etest.WaitFor(t, "the 30th file to be read", func() bool {
		b.Mu.Lock()
		defer b.Mu.Unlock()
		n := 0
		for _, ev := range b.Events {
			if ev.Type == event.ToolCompleted {
				n++
			}
		}
		return n >= 30
	})
	b.Kill9(t)
	b.Mu.Lock()
	before := compactions(b.Events)
	b.Mu.Unlock()
	if len(before) == 0 {
		t.Fatal("no compaction in the first 30 turns")
	}

	res := e.Run("resume", runID, "--json")
	if res.Code != 0 {
		t.Fatalf("resume: exit %d: %s", res.Code, res.Stderr)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	fin := e2etest.LastFinished(t, evs)
	// 61 turns, or 60 when the kill came while a model reply streamed:
	// the scripted model has spent that turn, and the repeated request
	// gets the next one.
	if fin.Status != "completed" || fin.Result != "Read them all." || fin.Turns < 60 {
		t.Errorf("final = %+v, want completed after 60 or 61 turns", fin)
	}
	var firstAfter string
	for i, r := range e.Srv.Requests() {
		if len(r.Body) > limit {
			continue // refused as too long, then compacted
		}
		if i > 0 && strings.Contains(string(r.Body), `"name":"read_file"`) && firstAfter == "" && r.Turn >= 30 {
			firstAfter = string(r.Body)
		}
	}
	if !strings.Contains(firstAfter, "[Summary of the earlier conversation, compacted to fit the context window]") {
		t.Errorf("the first request after the resume does not carry the compacted conversation:\n%.400s", firstAfter)
	}
	all := append(before, compactions(evs)...)
	for _, c := range all {
		if c.Summary == "" || c.Count < 1 || c.TokensAfter >= c.TokensBefore || c.ReplacedSeqFrom == 0 || c.ReplacedSeqTo < c.ReplacedSeqFrom {
			t.Errorf("compaction %+v", c)
		}
	}
	// The store has the replaced seqs, and runs show the summaries.
	stored := e.Run("runs", "events", runID, "--json")
	if !strings.Contains(stored.Stdout, `"replaced_seq_from":`) {
		t.Errorf("stored context.compacted lacks the replaced seqs")
	}
	t.Logf("%d compactions over 60 turns; %d requests, every answered one under %d bytes", len(all), len(e.Srv.Requests()), limit)
}

// With a known context window the conversation is compacted before a
// request would pass it, so the provider never refuses one; with
// --compact off the provider's refusal ends the run (exit 3).
func TestCompactionBeforeTheWindowAndOff(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t)
	turns := bigFiles(t, e.Workspace, 20, 2500)
	e.Srv = llmtest.NewServer(t, llmtest.Script{Turns: turns, MaxRequestBytes: 24_000, Standing: []llmtest.Turn{compactionReply}})
	res := e.Run("run", "--json", "--context-window", "5000", "read them")
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	cs := compactions(evs)
	if len(cs) == 0 {
		t.Fatal("no compaction")
	}
	for _, c := range cs {
		if c.Trigger != "window" {
			t.Errorf("compaction triggered by %s, want window", c.Trigger)
		}
	}
	for _, r := range e.Srv.Requests() {
		if len(r.Body) > 24_000 {
			t.Errorf("a request of %d bytes was sent past the window", len(r.Body))
		}
	}

	off := e2etest.New(t)
	offTurns := bigFiles(t, off.Workspace, 20, 2500)
	off.Srv = llmtest.NewServer(t, llmtest.Script{Turns: offTurns, MaxRequestBytes: 24_000})
	res = off.Run("run", "--json", "--compact", "off", "read them")
	if res.Code != 3 {
		t.Fatalf("--compact off: exit %d, want 3", res.Code)
	}
	if fin := e2etest.LastFinished(t, e2etest.DecodeEvents(t, res.Stdout)); !strings.Contains(fin.Detail, "longer than the model's context window") {
		t.Errorf("--compact off ended %+v", fin)
	}
}

// --max-tokens stops the run at the turn that passes it, with no further
// request; resume --max-tokens continues with a new budget; the final
// usage carries cost_usd when the price is known.
func TestBudgetMaxTokens(t *testing.T) {
	t.Parallel()
	used := &llmtest.Usage{PromptTokens: 300, CompletionTokens: 100}
	step := func(i int) llmtest.Turn {
		return llmtest.Turn{Usage: used, ToolCalls: []llmtest.Call{e2etest.ToolCall("list_files", fmt.Sprintf(`{"pattern":"*.%d"}`, i))}}
	}
	e := e2etest.New(t, step(1), step(2), step(3), llmtest.Turn{Usage: used, Text: "Done."})
	if err := os.MkdirAll(e.Home, 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(e.Home, "config.toml"), []byte("[prices.\"test-model\"]\nprompt_per_mtok = 2.5\ncompletion_per_mtok = 10\n"), 0o600)
	res := e.Run("run", "--json", "--max-tokens", "1000", "list things")
	evs := e2etest.DecodeEvents(t, res.Stdout)
	fin := e2etest.LastFinished(t, evs)
	if res.Code != 1 || fin.Reason != "budget_exhausted" || e.Srv.RequestCount() != 3 {
		t.Fatalf("exit %d, %+v after %d requests; want exit 1, budget_exhausted after 3 (1,200 tokens > 1,000)", res.Code, fin, e.Srv.RequestCount())
	}
	if want := (900*2.5 + 300*10) / 1e6; fin.Usage.CostUSD < want*0.999 || fin.Usage.CostUSD > want*1.001 {
		t.Errorf("cost_usd = %v, want %v", fin.Usage.CostUSD, want)
	}
	again := e.Run("resume", evs[0].RunID, "--json")
	if again.Code != 1 || e.Srv.RequestCount() != 3 {
		t.Errorf("resume without a new budget: exit %d after %d requests; want 1 and no request", again.Code, e.Srv.RequestCount())
	}
	more := e.Run("resume", evs[0].RunID, "--json", "--max-tokens", "1000")
	if fin := e2etest.LastFinished(t, e2etest.DecodeEvents(t, more.Stdout)); more.Code != 0 || fin.Status != "completed" {
		t.Errorf("resume --max-tokens 1000: exit %d, %+v", more.Code, fin)
	}
	bad := e.Run("run", "--max-cost", "1", "--model", "unpriced", "x")
	if bad.Code != 2 || !strings.Contains(bad.Stderr, `--max-cost needs the model's price: add [prices."unpriced"]`) {
		t.Errorf("--max-cost without a price: exit %d, %q", bad.Code, bad.Stderr)
	}
}

// A harness counts every phase against the run's budget.
func TestBudgetHarnessCountsEveryPhase(t *testing.T) {
	t.Parallel()
	used := &llmtest.Usage{PromptTokens: 300, CompletionTokens: 100}
	e := e2etest.NewHarness(t,
		llmtest.Turn{Usage: used, Text: "one done"},
		llmtest.Turn{Usage: used, Text: "two done"},
		llmtest.Turn{Usage: used, Text: "three done"},
	)
	plan := e.WritePlan(t, `{"objective":"Three","phases":[
		{"id":"one","instructions":"Do one.","evidence":{"type":"none"}},
		{"id":"two","instructions":"Do two.","depends_on":["one"],"evidence":{"type":"none"}},
		{"id":"three","instructions":"Do three.","depends_on":["two"],"evidence":{"type":"none"}}]}`)
	res := e.Run("harness", "--json", "--max-tokens", "700", "--plan-file", plan)
	fin := e2etest.LastFinished(t, e2etest.DecodeEvents(t, res.Stdout))
	if res.Code != 1 || fin.Reason != "budget_exhausted" || e.Srv.RequestCount() != 2 {
		t.Errorf("exit %d, %+v after %d requests; want budget_exhausted after 2 phases", res.Code, fin, e.Srv.RequestCount())
	}
}

// A 429 whose wait is longer than the call may take pauses a gateway run
// (docs/PROTOCOL.md#waits): it waits, kind sleep, reason rate_limited,
// until its resume_after, with no end, and the gateway resumes it by
// itself at that time, not before.
func TestRateLimitPausesThenGatewayResumes(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{Status: 429, Headers: map[string]string{"Retry-After": "2"}, Body: `{"error":{"message":"quota exceeded; try again later"}}`},
		llmtest.Turn{Text: "Done after the pause."},
	)
	srv, db := e.InProcessGateway(nil)
	c := e2etest.GwDial(t, srv.Addr())
	sid := e2etest.GwCall[api.SessionInfo](t, c, api.MethodSessionCreate, nil).SessionID
	run := e2etest.GwCall[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "go",
		Options: api.RunOptions{ModelCallTimeout: supervisor.Duration(time.Second)}})
	paused, w := e2etest.GwWaiting(t, c, run.RunID, 0)
	if w.Kind != event.WaitSleep || w.Reason != event.ReasonRateLimited || w.ResumeAfter == "" || w.Until != w.ResumeAfter {
		t.Fatalf("the pause: %+v, want a sleep until resume_after, reason rate_limited", w)
	}
	resumeAfter, err := time.Parse(time.RFC3339, w.ResumeAfter)
	if err != nil {
		t.Fatal(err)
	}
	if info := e2etest.GwCall[api.RunInfo](t, c, api.MethodRunGet, api.RunParams{RunID: run.RunID}); info.Status != event.StatusWaiting {
		t.Errorf("run.get during the pause: %s, want waiting", info.Status)
	}
	evs := e2etest.GwWait(t, c, run.RunID)
	if end := e2etest.LastFrame(evs); end.Event != event.RunCompleted {
		t.Fatalf("the run ended %s", end.Event)
	}
	for _, f := range evs {
		switch {
		case f.Seq < paused.Seq && gatewaytest.IsTerminal(f.Event):
			t.Errorf("the paused run ended (%s) before it was resumed", f.Event)
		case f.Seq < paused.Seq && f.Event == event.Warning && !strings.Contains(string(f.Data), "quota exceeded"):
			t.Errorf("the warning says %s; want the provider's message", f.Data)
		case f.Seq > paused.Seq && f.Event == event.RunStarted && f.TS.Before(resumeAfter.Add(-time.Second)):
			// resume_after has whole seconds; the resume may not start before it.
			t.Errorf("resumed at %s, before resume_after %s", f.TS.Format(time.RFC3339Nano), w.ResumeAfter)
		}
	}
	if r, _ := db.GetRun(context.Background(), run.RunID); r.Result != "Done after the pause." {
		t.Errorf("result %q", r.Result)
	}
}

// A session's memory is bounded: after 50 runs, each answered at length,
// the 51st run's request still fits, because earlier runs were compacted
// into a summary.
func TestSessionMemoryBounded(t *testing.T) {
	t.Parallel()
	const limit = 20_000
	long := strings.Repeat("The answer, at length. ", 90) // ~2 KB per reply
	e := e2etest.New(t)
	e.Srv = llmtest.NewServer(t, llmtest.Script{Loop: true, Turns: []llmtest.Turn{{Text: long}},
		MaxRequestBytes: limit, Standing: []llmtest.Turn{compactionReply}})
	srv, _ := e.InProcessGateway(nil)
	c := e2etest.GwDial(t, srv.Addr())
	sid := e2etest.GwCall[api.SessionInfo](t, c, api.MethodSessionCreate, nil).SessionID
	e2etest.GwCall[api.SessionResumeResult](t, c, api.MethodSessionResume, api.SessionResumeParams{SessionID: sid})
	compacted := 0
	for i := 1; i <= 51; i++ {
		run := e2etest.GwCall[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{SessionID: sid,
			Input: fmt.Sprintf("question %d", i), Options: api.RunOptions{ContextWindow: 4000}})
		evs := e2etest.GwWait(t, c, run.RunID)
		if fin := e2etest.FinishedFrame(t, e2etest.LastFrame(evs)); fin.Status != "completed" {
			t.Fatalf("run %d: %+v", i, fin)
		}
		for _, ev := range evs {
			if ev.Event == event.ContextCompacted {
				compacted++
			}
		}
	}
	reqs := e.Srv.Requests()
	last := reqs[len(reqs)-1]
	if len(last.Body) > limit || !strings.Contains(string(last.Body), "question 51") {
		t.Errorf("the 51st run's request is %d bytes (limit %d)", len(last.Body), limit)
	}
	for _, r := range reqs {
		if len(r.Body) > limit {
			t.Errorf("a request of %d bytes passed the window", len(r.Body))
		}
	}
	if compacted == 0 {
		t.Error("no compaction in 51 runs")
	}
	t.Logf("51 runs, %d compactions, last request %d bytes", compacted, len(last.Body))
}

// A run recorded with compaction replays offline: the summary requests
// are in the cassette, and the replayed run makes the same requests.
func TestCompactionRecordsAndReplays(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t)
	turns := bigFiles(t, e.Workspace, 12, 2500)
	e.Srv = llmtest.NewServer(t, llmtest.Script{Turns: turns, Standing: []llmtest.Turn{compactionReply}})
	cassette := filepath.Join(filepath.Dir(e.Workspace), "run.cassette.jsonl")
	rec := e.Run("run", "--json", "--context-window", "5000", "--record", cassette, "read them")
	if rec.Code != 0 {
		t.Fatalf("record: exit %d: %s", rec.Code, rec.Stderr)
	}
	want := e2etest.LastFinished(t, e2etest.DecodeEvents(t, rec.Stdout))
	if len(compactions(e2etest.DecodeEvents(t, rec.Stdout))) == 0 {
		t.Fatal("the recorded run did not compact")
	}
	rep := e.Run("run", "--json", "--context-window", "5000", "--replay", cassette, "read them")
	if rep.Code != 0 {
		t.Fatalf("replay: exit %d: %s", rep.Code, rep.Stderr)
	}
	evs := e2etest.DecodeEvents(t, rep.Stdout)
	if got := e2etest.LastFinished(t, evs); got.Result != want.Result || got.Turns != want.Turns {
		t.Errorf("replayed end %+v, recorded %+v", got, want)
	}
	if len(compactions(evs)) != len(compactions(e2etest.DecodeEvents(t, rec.Stdout))) {
		t.Error("the replay compacted differently")
	}
}

// A new budget given on resume stays with the run: a resume after a crash
// needs no flag again.
func TestBudgetGivenOnResumeIsKept(t *testing.T) {
	t.Parallel()
	used := &llmtest.Usage{PromptTokens: 300, CompletionTokens: 100}
	step := func(i int) llmtest.Turn {
		return llmtest.Turn{Usage: used, ToolCalls: []llmtest.Call{e2etest.ToolCall("list_files", fmt.Sprintf(`{"pattern":"*.%d"}`, i))}}
	}
	e := e2etest.New(t, step(1), step(2), step(3), step(4), llmtest.Turn{Usage: used, Text: "Done."})
	res := e.Run("run", "--json", "--max-tokens", "500", "list things")
	runID := e2etest.DecodeEvents(t, res.Stdout)[0].RunID
	if res.Code != 1 || e.Srv.RequestCount() != 2 {
		t.Fatalf("first: exit %d after %d requests", res.Code, e.Srv.RequestCount())
	}
	// 800 spent; 500 more allows two more requests, to 1,600.
	res = e.Run("resume", runID, "--json", "--max-tokens", "500")
	if res.Code != 1 || e.Srv.RequestCount() != 4 {
		t.Fatalf("resume with 500 more: exit %d after %d requests, want exit 1 after 4", res.Code, e.Srv.RequestCount())
	}
	var stored struct {
		Config json.RawMessage `json:"config"`
	}
	show := e.Run("runs", "show", runID, "--json")
	if err := json.Unmarshal([]byte(show.Stdout), &stored); err != nil || !strings.Contains(string(stored.Config), `"max_tokens":1300`) {
		t.Errorf("stored options %s (%v), want max_tokens 1300", stored.Config, err)
	}
}

// A job's run paused by a rate limit is not a failed attempt: the gateway
// resumes it, and the job run completes.
func TestJobRunPausedByRateLimitCompletes(t *testing.T) {
	t.Parallel()
	limited := llmtest.Turn{Status: 429, Headers: map[string]string{"Retry-After": "1"}, Body: `{"error":{"message":"slow down"}}`}
	// Five 429s use up the call's attempts: the run pauses until Retry-After.
	e := e2etest.New(t, limited, limited, limited, limited, limited, llmtest.Turn{Text: "Report written."})
	srv, db := e.JobsGateway(true)
	addr := srv.Addr()
	job := e2etest.JSONLines[scheduler.Job](t, e.MustJobs(addr, "create", "--name", "report", "--cron", "@yearly", "--prompt", "write the report", "--json"))[0]
	e.MustJobs(addr, "run-now", job.ID)
	// Up to about 8 s of retries (backoff raised to Retry-After), then the
	// pause: WaitFor's 15 s is too tight under -race on a busy machine.
	var last store.JobRun
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if runs := e2etest.JobRuns(t, db, job.ID); len(runs) > 0 {
			last = runs[0]
		}
		if last.Status == event.StatusCompleted || last.Status == event.StatusFailed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job run did not end within 60s: %+v", last)
		}
	}
	if last.Status != event.StatusCompleted || len(e2etest.JobRuns(t, db, job.ID)) != 1 {
		t.Fatalf("job run %+v (%d in all), want one that completed after the pause", last, len(e2etest.JobRuns(t, db, job.ID)))
	}
	r, err := db.GetRun(context.Background(), last.RunID)
	if err != nil || r.Status != "completed" || r.Result != "Report written." {
		t.Errorf("the job's run: %+v %v", r, err)
	}
}
