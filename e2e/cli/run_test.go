package cli

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/llm/llmtest"
)

// TestCrashDuringToolThenResume kills the agent with SIGKILL while a bash
// call runs. Resume must not repeat the finished call, must not re-run the
// interrupted non-read-only call, must tell the model, and must finish.
func TestCrashDuringToolThenResume(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", `{"command":"echo ran >> count.txt"}`)}},
		llmtest.Turn{Text: "Now the long step.", ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", `{"command":"`+e2etest.MarkThenSleep+`"}`)}},
		llmtest.Turn{Text: "The long step was interrupted; the count is right, so I am done."},
	)
	b := e.Start("run", "--json", "count, then wait")
	runID := b.WaitEvent(t, event.RunStarted).RunID
	started := filepath.Join(e.Workspace, "started")
	e2etest.WaitFor(t, "the second bash call to start", func() bool {
		data, err := os.ReadFile(started)
		return err == nil && strings.HasSuffix(string(data), "\n")
	})
	bash, _ := e2etest.WaitSandboxed(t, e.Workspace)
	b.Kill9(t)
	// The sandboxed command dies with the process that ran it.
	e2etest.WaitFor(t, "the bash call to die with agent", func() bool { return !e2etest.Alive(bash) })

	res := e.Run("resume", runID, "--json")
	if res.Code != 0 {
		t.Fatalf("resume exit %d: %s", res.Code, res.Stderr)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	if evs[0].Type != event.RunStarted || evs[0].Seq <= 1 {
		t.Errorf("resumed stream starts with %s seq %d; want run.started continuing the run's seq", evs[0].Type, evs[0].Seq)
	}
	if fin := e2etest.LastFinished(t, evs); fin.Status != "completed" || fin.Turns != 3 {
		t.Errorf("final = %+v, want completed after 3 turns in all", fin)
	}
	if n := e2etest.CountLines(t, filepath.Join(e.Workspace, "count.txt")); n != 1 {
		t.Errorf("count.txt has %d lines: the finished bash call ran again", n)
	}
	for _, ev := range evs {
		if ev.Type == event.ToolStarted {
			t.Errorf("resume ran a tool: %s", ev.Data)
		}
	}

	// The model was asked once more, with the interrupted result in place.
	reqs := e.Srv.Requests()
	if len(reqs) != 3 {
		t.Fatalf("model got %d requests, want 3", len(reqs))
	}
	last := reqs[2].LastMessage()
	if last.Role != "tool" || !strings.HasPrefix(last.Content, "interrupted:") {
		t.Errorf("last message of the resumed request = %+v, want an interrupted tool result", last)
	}

	// The stored transcript is whole.
	show := e.Run("runs", "show", runID, "--json")
	var v e2etest.RunView
	if err := json.Unmarshal([]byte(show.Stdout), &v); err != nil {
		t.Fatalf("runs show --json: %v\n%s", err, show.Stdout)
	}
	var roles []string
	for _, m := range v.Messages {
		roles = append(roles, m.Role)
	}
	if got := strings.Join(roles, ","); got != "user,assistant,tool,assistant,tool,assistant" {
		t.Errorf("transcript roles = %s", got)
	}
	if v.Status != "completed" || v.Turns != 3 {
		t.Errorf("stored run: status %s turns %d", v.Status, v.Turns)
	}
}

// TestCrashDuringModelCallThenResume kills the agent while the model is
// streaming. Resume asks the model again with the same conversation.
func TestCrashDuringModelCallThenResume(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("write_file", `{"path":"a.txt","content":"a"}`)}},
		llmtest.Turn{Text: "I am thinking about", Hang: true},
		llmtest.Turn{Text: "Done."},
	)
	b := e.Start("run", "--json", "write a")
	runID := b.WaitEvent(t, event.RunStarted).RunID
	b.WaitEvent(t, event.ToolCompleted)
	e2etest.WaitFor(t, "the second model call", func() bool { return e.Srv.RequestCount() == 2 })
	b.Kill9(t)

	res := e.Run("resume", runID, "--json")
	if res.Code != 0 {
		t.Fatalf("resume exit %d: %s", res.Code, res.Stderr)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	if fin := e2etest.LastFinished(t, evs); fin.Result != "Done." {
		t.Errorf("result = %q", fin.Result)
	}
	reqs := e.Srv.Requests()
	if len(reqs) != 3 {
		t.Fatalf("model got %d requests, want 3", len(reqs))
	}
	before, after := reqs[1].Messages(), reqs[2].Messages()
	if !e2etest.EqualJSON(t, before, after) {
		t.Errorf("resumed request differs from the interrupted one:\n%+v\n%+v", before, after)
	}
	for _, ev := range evs {
		if ev.Type == event.ToolStarted {
			t.Errorf("resume ran a tool again: %s", ev.Data)
		}
	}
}

// TestLeaseAndInterrupt: a second process cannot drive a live run (exit 4,
// naming the holder); Ctrl-C saves the run as interrupted (exit 130); resume
// then finishes it.
func TestLeaseAndInterrupt(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{Text: "Let me think", Hang: true},
		llmtest.Turn{Text: "Finished after the interruption."},
	)
	b := e.Start("run", "--json", "think hard")
	runID := b.WaitEvent(t, event.RunStarted).RunID
	e2etest.WaitFor(t, "the model call", func() bool { return e.Srv.RequestCount() == 1 })

	busy := e.Run("resume", runID[:8])
	if busy.Code != 4 {
		t.Fatalf("resume of a live run: exit %d, want 4; stderr: %s", busy.Code, busy.Stderr)
	}
	holder := "/" + strconv.Itoa(b.Cmd.Process.Pid) + "/"
	if !strings.Contains(busy.Stderr, "lease held by") || !strings.Contains(busy.Stderr, holder) {
		t.Errorf("busy message does not name the holder %q: %s", holder, busy.Stderr)
	}
	if strings.Count(strings.TrimSpace(busy.Stderr), "\n") != 0 {
		t.Errorf("busy message is not one line: %q", busy.Stderr)
	}

	if err := b.Cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	<-b.Done
	err := b.Cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 130 {
		t.Fatalf("after SIGINT: %v, want exit 130", err)
	}
	if ev := b.WaitEvent(t, event.RunInterrupted); ev.RunID != runID {
		t.Errorf("interrupted event for run %s", ev.RunID)
	}
	if !strings.Contains(b.Stderr.String(), "run "+runID+" interrupted") {
		t.Errorf("Ctrl-C on --json does not say which run to resume: %q", b.Stderr.String())
	}

	res := e.Run("resume", runID, "--json")
	if res.Code != 0 {
		t.Fatalf("resume exit %d: %s", res.Code, res.Stderr)
	}
	if fin := e2etest.LastFinished(t, e2etest.DecodeEvents(t, res.Stdout)); fin.Result != "Finished after the interruption." {
		t.Errorf("result = %q", fin.Result)
	}
	again := e.Run("resume", runID)
	if again.Code != 4 || !strings.Contains(again.Stderr, "already completed") {
		t.Errorf("resume of a completed run: exit %d %q, want 4 'already completed'", again.Code, again.Stderr)
	}
}

// TestExampleCassette runs the README's offline example: the shipped
// cassette replays against a fresh workspace with no key and no network.
func TestExampleCassette(t *testing.T) {
	t.Parallel()
	prompt, err := os.ReadFile(filepath.Join(e2etest.Root(), "examples", "hello.prompt"))
	if err != nil {
		t.Fatal(err)
	}
	cassette, err := filepath.Abs(filepath.Join(e2etest.Root(), "examples", "hello.cassette.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	e := e2etest.New(t)
	cmd := e.Command("run", "--json", "--replay", cassette, strings.TrimSpace(string(prompt)))
	cmd.Env = append(cmd.Env, "OPENAI_BASE_URL=https://api.openai.com/v1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("example run: %v (if prompts or tools changed, re-record with scripts/record-example.sh)", err)
	}
	if fin := e2etest.LastFinished(t, e2etest.DecodeEvents(t, string(out))); fin.Status != "completed" || fin.Turns != 3 {
		t.Errorf("final = %+v", fin)
	}
	got, err := os.ReadFile(filepath.Join(e.Workspace, "hello.txt"))
	if err != nil || !strings.HasPrefix(string(got), "Hello from agent!") {
		t.Errorf("hello.txt = %q, %v", got, err)
	}
	if e.Srv.RequestCount() != 0 {
		t.Errorf("replay made %d model requests", e.Srv.RequestCount())
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	res := e2etest.New(t).Run("version")
	if res.Code != 0 || !strings.HasPrefix(res.Stdout, "agent ") || !strings.Contains(res.Stdout, "(commit ") {
		t.Errorf("version: exit %d %q", res.Code, res.Stdout)
	}
}

// TestEventsFollow: `runs events --follow` on a live run prints events as
// they are persisted and stops after the run's last event.
func TestEventsFollow(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", `{"command":"sleep 0.3"}`)}},
		llmtest.Turn{Text: "slowly done", ChunkDelayMS: 100},
	)
	b := e.Start("run", "--json", "go slowly")
	runID := b.WaitEvent(t, event.RunStarted).RunID
	res := e.Run("runs", "events", runID, "--follow", "--json")
	if res.Code != 0 {
		t.Fatalf("follow: exit %d %s", res.Code, res.Stderr)
	}
	evs := e2etest.DecodeEvents(t, res.Stdout)
	if evs[0].Seq != 1 || evs[len(evs)-1].Type != event.RunCompleted {
		t.Errorf("follow printed seq %d..%s", evs[0].Seq, evs[len(evs)-1].Type)
	}
	<-b.Done
	b.Mu.Lock()
	defer b.Mu.Unlock()
	if len(b.Events) != len(evs) {
		t.Errorf("follow printed %d events, the run printed %d", len(evs), len(b.Events))
	}
}

// TestKill9KeepsWhatWasPrinted: kill -9 while the model thinks, after
// --json printed the write's artifact.created and the streamed start of
// the reply. Every event printed but a delta is in the store with the same
// seq, and no seq printed (a delta's included) is given to another event
// after resume.
func TestKill9KeepsWhatWasPrinted(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{Text: "Writing.", ToolCalls: []llmtest.Call{e2etest.ToolCall("write_file", `{"path":"a.txt","content":"a"}`)}},
		llmtest.Turn{Text: "I am thinking about", Hang: true},
		llmtest.Turn{Text: "Done."},
	)
	b := e.Start("run", "--json", "write a")
	runID := b.WaitEvent(t, event.RunStarted).RunID
	e2etest.WaitFor(t, "a streamed delta of the second reply", func() bool {
		b.Mu.Lock()
		defer b.Mu.Unlock()
		last := b.Events[len(b.Events)-1]
		return e.Srv.RequestCount() == 2 && last.Type == event.MessageDelta
	})
	b.Kill9(t)
	b.Mu.Lock()
	printed := append([]event.Event(nil), b.Events...)
	b.Mu.Unlock()

	db := e.OpenStore(t)
	stored, err := db.ListEvents(context.Background(), runID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	bySeq := map[int64]string{}
	for _, s := range stored {
		bySeq[s.Seq] = s.Type
	}
	for _, p := range printed {
		if p.Type != event.MessageDelta && bySeq[p.Seq] != p.Type {
			t.Errorf("printed %s as seq %d, but the store has %q there", p.Type, p.Seq, bySeq[p.Seq])
		}
	}
	db.Close()
	res := e.Run("resume", runID, "--json")
	if res.Code != 0 {
		t.Fatalf("resume exit %d: %s", res.Code, res.Stderr)
	}
	// As stored after the resume, seqs are 1..N with no gap (a client
	// waiting for the next seq is not left waiting), and every seq printed
	// holds what was printed (a delta's a delta, lost or not).
	resumed := e2etest.DecodeEvents(t, res.Stdout)
	all := gaplessEvents(t, e, runID)
	if last := all[len(all)-1]; last.Type != event.RunCompleted || last.Seq != resumed[len(resumed)-1].Seq {
		t.Errorf("the store ends with %s at %d; resume printed its end at %d", last.Type, last.Seq, resumed[len(resumed)-1].Seq)
	}
	if first := resumed[0].Seq; first < 2 || all[first-2].Seq != first-1 {
		t.Errorf("resume began at seq %d, not right after a stored event", first)
	}
	for _, p := range printed {
		switch {
		case p.Seq > int64(len(all)):
			t.Errorf("seq %d was printed as %s, and the store ends before it", p.Seq, p.Type)
		case all[p.Seq-1].Type != p.Type:
			t.Errorf("seq %d was printed as %s, then given to %s", p.Seq, p.Type, all[p.Seq-1].Type)
		}
	}
}

// TestDiskFull: the store's disk fills up mid-run. The run stops with exit
// 5 and one line that says so and that it can be resumed, before the write
// whose call could not be recorded runs; once space is freed, resume asks
// the model again (its lost reply was in flight) and finishes, and the
// run's stored seqs have no gap where the failed write was.
func TestDiskFull(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs for AGENT_HOME")
	}
	content := strings.Repeat("a line of the big file\n", (400<<10)/23)
	e := e2etest.New(t, e2etest.WriteTurn("big.txt", content), e2etest.WriteTurn("big.txt", content), llmtest.Turn{Text: "Wrote it."})
	if err := os.MkdirAll(e.Home, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", e.Home).CombinedOutput(); err != nil {
		t.Fatalf("mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", e.Home).Run() })
	if res := e.Run("runs", "list"); res.Code != 0 {
		t.Fatalf("create the store: %d %s", res.Code, res.Stderr)
	}
	// Leave about 150 KB: the write's tool.started alone is 400 KB.
	var fs syscall.Statfs_t
	if err := syscall.Statfs(e.Home, &fs); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(e.Home, "filler")
	if err := os.WriteFile(filler, make([]byte, int64(fs.Bavail)*fs.Bsize-150<<10), 0o600); err != nil {
		t.Fatal(err)
	}

	res := e.Run("run", "--json", "write a big file")
	if res.Code != 5 || !strings.Contains(res.Stderr, "the disk is full") || !strings.Contains(res.Stderr, "'agent resume ") ||
		strings.Count(strings.TrimSpace(res.Stderr), "\n") != 0 {
		t.Fatalf("disk full: exit %d %q, want 5 and one line saying so and how to resume", res.Code, res.Stderr)
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "big.txt")); err == nil {
		t.Error("the write ran though its tool.started was never recorded")
	}
	runID := e2etest.DecodeRunID(t, res.Stdout)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if res := e.Run("resume", runID); res.Code != 0 {
		t.Fatalf("resume after freeing space: exit %d %s", res.Code, res.Stderr)
	}
	if data, err := os.ReadFile(filepath.Join(e.Workspace, "big.txt")); err != nil || len(data) != len(content) {
		t.Errorf("big.txt after resume: %d bytes, %v", len(data), err)
	}
	stored := gaplessEvents(t, e, runID)
	if last := stored[len(stored)-1]; last.Type != event.RunCompleted {
		t.Errorf("the run ended %s %s, want run.completed", last.Type, last.Data)
	}
}
