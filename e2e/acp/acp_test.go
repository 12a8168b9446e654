package acp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	sdk "github.com/coder/acp-go-sdk"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/llm/llmtest"
	"agent/store"
)

func TestMain(m *testing.M) { e2etest.Main(m, nil) }

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), e2etest.Patience)
	t.Cleanup(cancel)
	return ctx
}

// sessionRuns are the runs of session id in e's store, oldest first.
func sessionRuns(t *testing.T, e *e2etest.Env, id sdk.SessionId) []store.Run {
	t.Helper()
	db := e.OpenStore(t)
	defer db.Close()
	runs, err := db.ListSessionRuns(context.Background(), string(id))
	if err != nil {
		t.Fatal(err)
	}
	return runs
}

// TestACPPromptWithToolCall: initialize, session/new and a prompt whose run
// writes a file and answers. The editor sees, in order, the tool call (an
// edit, in progress, at the file's absolute path, as a diff from nothing
// to the new text), its completion, and the answer streamed; the prompt
// ends end_turn; the session is a local session in the store with the
// run completed, so agent chat can go on in it.
func TestACPPromptWithToolCall(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("write_file", `{"path":"notes/hello.txt","content":"hi\n"}`)}},
		llmtest.Turn{Text: "I wrote notes/hello.txt."},
	)
	ctx := testContext(t)
	c := startACP(t, e)
	c.initialize(ctx)
	id := c.newSession(ctx, e)
	resp, err := c.prompt(ctx, id, "write hi to notes/hello.txt")
	if err != nil {
		t.Fatalf("session/prompt: %v", err)
	}
	if resp.StopReason != sdk.StopReasonEndTurn {
		t.Errorf("stop reason %q, want end_turn", resp.StopReason)
	}
	ups, _ := c.since(0)
	if got, want := kinds(ups), "tool_call:in_progress tool_call_update:completed agent_message_chunk"; got != want {
		t.Fatalf("updates %q, want %q: %v", got, want, ups)
	}
	call := ups[0]
	path := filepath.Join(e.Workspace, "notes/hello.txt")
	if call["kind"] != "edit" || !strings.Contains(call["title"].(string), "notes/hello.txt") {
		t.Errorf("tool call %v: want kind edit, titled with the path", call)
	}
	locs, _ := call["locations"].([]any)
	if len(locs) != 1 || locs[0].(map[string]any)["path"] != path {
		t.Errorf("tool call locations %v, want [%s]", call["locations"], path)
	}
	content, _ := call["content"].([]any)
	if len(content) != 1 {
		t.Fatalf("tool call content %v, want one diff", call["content"])
	}
	diff := content[0].(map[string]any)
	if _, old := diff["oldText"]; diff["type"] != "diff" || diff["path"] != path || diff["newText"] != "hi\n" || old {
		t.Errorf("diff %v: want a new file's diff to %q", diff, "hi\n")
	}
	if got := text(ups, "agent_message_chunk"); got != "I wrote notes/hello.txt." {
		t.Errorf("the answer streamed as %q", got)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "hi\n" {
		t.Errorf("notes/hello.txt: %q, %v", b, err)
	}
	runs := sessionRuns(t, e, id)
	if len(runs) != 1 || runs[0].Status != event.StatusCompleted || runs[0].Prompt != "write hi to notes/hello.txt" {
		t.Fatalf("runs of the session: %+v; want one completed", runs)
	}
	db := e.OpenStore(t)
	defer db.Close()
	if s, err := db.GetSession(ctx, string(id)); err != nil || !s.Local || s.Title == "" {
		t.Errorf("session %+v, %v: want a local session titled by its first prompt", s, err)
	}
}

// TestACPEditDiff: an edit_file call shows the whole file before and
// after, so the editor can show the change in place.
func TestACPEditDiff(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("edit_file", `{"path":"main.go","old_string":"old()","new_string":"new()"}`)}},
		llmtest.Turn{Text: "Renamed."},
	)
	if err := os.WriteFile(filepath.Join(e.Workspace, "main.go"), []byte("package main\n\nfunc main() { old() }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	c := startACP(t, e)
	c.initialize(ctx)
	id := c.newSession(ctx, e)
	if _, err := c.prompt(ctx, id, "call new instead of old"); err != nil {
		t.Fatalf("session/prompt: %v", err)
	}
	ups, _ := c.since(0)
	diff := ups[0]["content"].([]any)[0].(map[string]any)
	if diff["oldText"] != "package main\n\nfunc main() { old() }\n" || diff["newText"] != "package main\n\nfunc main() { new() }\n" {
		t.Errorf("edit diff %v: want the whole file before and after", diff)
	}
}

// TestACPPermission: with --ask bash, each bash call is asked of the
// editor with session/request_permission (allow once, allow always,
// reject), before it runs. Allowed, it runs and the answer is recorded via
// the editor; rejected, it never runs, and the model is told.
func TestACPPermission(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", `{"command":"echo yes > allowed.txt"}`)}},
		llmtest.Turn{Text: "Done."},
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", `{"command":"echo no > rejected.txt"}`)}},
		llmtest.Turn{Text: "Understood."},
	)
	ctx := testContext(t)
	c := startACP(t, e, "--ask", "bash", "--sandbox", "off")
	c.initialize(ctx)
	id := c.newSession(ctx, e)

	c.setPermit(allow(sdk.PermissionOptionKindAllowOnce))
	resp, err := c.prompt(ctx, id, "make allowed.txt")
	if err != nil || resp.StopReason != sdk.StopReasonEndTurn {
		t.Fatalf("allowed prompt: %v, %v", resp.StopReason, err)
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "allowed.txt")); err != nil {
		t.Errorf("the allowed call did not run: %v", err)
	}
	c.mu.Lock()
	asked := c.asked
	c.mu.Unlock()
	if len(asked) != 1 {
		t.Fatalf("%d permissions asked, want 1", len(asked))
	}
	p := asked[0]
	var optionKinds []string
	for _, o := range p.Options {
		optionKinds = append(optionKinds, string(o.Kind))
	}
	if got := strings.Join(optionKinds, " "); got != "allow_once allow_always reject_once" {
		t.Errorf("permission options %q", got)
	}
	if p.ToolCall.Kind == nil || *p.ToolCall.Kind != sdk.ToolKindExecute || p.ToolCall.Title == nil || !strings.Contains(*p.ToolCall.Title, "echo yes") {
		t.Errorf("permission's tool call %+v: want execute, titled with the command", p.ToolCall)
	}
	ups, n := c.since(0)
	if got := kinds(ups); !strings.HasPrefix(got, "tool_call:pending tool_call_update:in_progress tool_call_update:completed") {
		t.Errorf("updates %q: the call is pending, and starts only once allowed", got)
	}

	c.setPermit(allow(sdk.PermissionOptionKindRejectOnce))
	resp, err = c.prompt(ctx, id, "make rejected.txt")
	if err != nil || resp.StopReason != sdk.StopReasonEndTurn {
		t.Fatalf("rejected prompt: %v, %v", resp.StopReason, err)
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "rejected.txt")); err == nil {
		t.Errorf("the rejected call ran")
	}
	ups, _ = c.since(n)
	if got := kinds(ups); !strings.HasPrefix(got, "tool_call:pending tool_call_update:failed") || strings.Contains(got, "completed") {
		t.Errorf("updates %q: a rejected call fails, never starting", got)
	}
	reqs := e.Srv.Requests()
	if last := string(reqs[len(reqs)-1].Body); !strings.Contains(last, "denied (editor)") {
		t.Errorf("the model was not told the call was denied: %s", last)
	}
	db := e.OpenStore(t)
	defer db.Close()
	runs := sessionRuns(t, e, id)
	ws, err := db.Waits(ctx, runs[0].ID)
	if err != nil || len(ws) != 1 || ws[0].Resolution == nil || ws[0].Resolution.Via != event.ViaEditor || ws[0].Resolution.Outcome != event.WaitAllowed {
		t.Errorf("the first run's waits %+v, %v: want one allowed via the editor", ws, err)
	}
}

// TestACPAllowAlways: "allow always" allows the rule for the rest of the
// run: the run's second bash call is not asked again.
func TestACPAllowAlways(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", `{"command":"echo a > a.txt"}`)}},
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", `{"command":"echo b > b.txt"}`)}},
		llmtest.Turn{Text: "Both."},
	)
	ctx := testContext(t)
	c := startACP(t, e, "--ask", "bash", "--sandbox", "off")
	c.initialize(ctx)
	id := c.newSession(ctx, e)
	c.setPermit(allow(sdk.PermissionOptionKindAllowAlways))
	if resp, err := c.prompt(ctx, id, "make a.txt and b.txt"); err != nil || resp.StopReason != sdk.StopReasonEndTurn {
		t.Fatalf("prompt: %v, %v", resp.StopReason, err)
	}
	c.mu.Lock()
	asked := len(c.asked)
	c.mu.Unlock()
	if asked != 1 {
		t.Errorf("%d permissions asked, want 1: always covers the second call", asked)
	}
	for _, f := range []string{"a.txt", "b.txt"} {
		if _, err := os.Stat(filepath.Join(e.Workspace, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestACPCancel: session/cancel while the model answers interrupts the
// run, resumably; the prompt ends cancelled, and the next prompt goes on
// in the session with the interrupted one in its context.
func TestACPCancel(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{Text: "Starting a long answer", Hang: true},
		llmtest.Turn{Text: "Here again."},
	)
	ctx := testContext(t)
	c := startACP(t, e)
	c.initialize(ctx)
	id := c.newSession(ctx, e)
	answered := make(chan sdk.PromptResponse, 1)
	go func() {
		resp, err := c.prompt(ctx, id, "tell me a long story")
		if err != nil {
			t.Errorf("session/prompt: %v", err)
		}
		answered <- resp
	}()
	e2etest.WaitFor(t, "the answer to begin", func() bool {
		ups, _ := c.since(0)
		return strings.Contains(text(ups, "agent_message_chunk"), "Starting")
	})
	if err := c.conn.Cancel(ctx, sdk.CancelNotification{SessionId: id}); err != nil {
		t.Fatal(err)
	}
	select {
	case resp := <-answered:
		if resp.StopReason != sdk.StopReasonCancelled {
			t.Errorf("stop reason %q, want cancelled", resp.StopReason)
		}
	case <-ctx.Done():
		t.Fatal("the cancelled prompt never answered")
	}
	runs := sessionRuns(t, e, id)
	if len(runs) != 1 || runs[0].Status != event.StatusInterrupted {
		t.Fatalf("runs %+v: want one interrupted", runs)
	}
	resp, err := c.prompt(ctx, id, "are you there?")
	if err != nil || resp.StopReason != sdk.StopReasonEndTurn {
		t.Fatalf("the next prompt: %v, %v", resp.StopReason, err)
	}
	reqs := e.Srv.Requests()
	if last := string(reqs[len(reqs)-1].Body); !strings.Contains(last, "tell me a long story") {
		t.Errorf("the next run lacks the interrupted one's prompt in its context: %s", last)
	}
}

// TestACPKilledThenLoaded: agent acp is killed (kill -9) while its run
// asks the editor a permission; meanwhile the call is approved from
// another channel (agent approve). A new agent acp's session/load replays
// the session (the first prompt, its answer, the pending call) and says
// the run was left unfinished; the next prompt goes on with that run
// first, running the approved call without asking again, then answers
// the new prompt, with everything in the store once.
func TestACPKilledThenLoaded(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{Text: "Hello, I am here."},
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", `{"command":"echo once >> ran.txt"}`)}},
		llmtest.Turn{Text: "The command ran."},
		llmtest.Turn{Text: "Yes, all done."},
	)
	ctx := testContext(t)
	c := startACP(t, e, "--ask", "bash", "--sandbox", "off")
	c.initialize(ctx)
	id := c.newSession(ctx, e)
	if _, err := c.prompt(ctx, id, "hello"); err != nil {
		t.Fatalf("first prompt: %v", err)
	}
	c.setPermit(func(sdk.RequestPermissionRequest) sdk.RequestPermissionResponse {
		_ = c.cmd.Process.Signal(syscall.SIGKILL) // the editor's agent dies while asked
		<-c.done
		return sdk.RequestPermissionResponse{Outcome: sdk.NewRequestPermissionOutcomeCancelled()}
	})
	if _, err := c.prompt(ctx, id, "run the command"); err == nil {
		t.Fatal("the prompt of a killed agent answered")
	}
	_ = c.cmd.Wait()
	runs := sessionRuns(t, e, id)
	if len(runs) != 2 || runs[1].Status != event.StatusWaiting {
		t.Fatalf("runs after the kill: %+v; want the second waiting", runs)
	}
	if r := e.Run("approve", runs[1].ID); r.Code != 0 {
		t.Fatalf("agent approve: exit %d: %s", r.Code, r.Stderr)
	}

	c2 := startACP(t, e, "--ask", "bash", "--sandbox", "off")
	c2.initialize(ctx)
	if _, err := c2.conn.LoadSession(ctx, sdk.LoadSessionRequest{SessionId: id, Cwd: e.Workspace, McpServers: []sdk.McpServer{}}); err != nil {
		t.Fatalf("session/load: %v", err)
	}
	ups, n := c2.since(0)
	if got, want := kinds(ups), "user_message_chunk agent_message_chunk user_message_chunk tool_call:pending agent_thought_chunk"; got != want {
		t.Fatalf("replayed %q, want %q: %v", got, want, ups)
	}
	if text(ups, "user_message_chunk") != "hellorun the command" || text(ups, "agent_message_chunk") != "Hello, I am here." {
		t.Errorf("replayed messages %q and %q", text(ups, "user_message_chunk"), text(ups, "agent_message_chunk"))
	}
	if note := text(ups, "agent_thought_chunk"); !strings.Contains(note, runs[1].ID) || !strings.Contains(note, "next prompt goes on with it") {
		t.Errorf("load does not say the run goes on: %q", note)
	}

	resp, err := c2.prompt(ctx, id, "is it done?")
	if err != nil || resp.StopReason != sdk.StopReasonEndTurn {
		t.Fatalf("prompt after load: %v, %v", resp.StopReason, err)
	}
	ups, _ = c2.since(n)
	if got, want := kinds(ups), "tool_call_update:in_progress tool_call_update:completed agent_message_chunk"; !strings.HasPrefix(got, want) {
		t.Errorf("updates %q, want %q first (the approved call, then both answers)", got, want)
	}
	if got := text(ups, "agent_message_chunk"); got != "The command ran.Yes, all done." {
		t.Errorf("answers %q", got)
	}
	if b, _ := os.ReadFile(filepath.Join(e.Workspace, "ran.txt")); string(b) != "once\n" {
		t.Errorf("ran.txt %q: the approved call runs once", b)
	}
	runs = sessionRuns(t, e, id)
	if len(runs) != 3 || runs[1].Status != event.StatusCompleted || runs[2].Status != event.StatusCompleted {
		t.Errorf("runs %+v: want three, the resumed one and the new one completed", runs)
	}
}

// TestACPClientGoneWaits: an editor that closes the connection while a
// permission is asked leaves the run waiting in the store (agent acp
// exits 0); agent approve --resume answers it from the terminal and the
// run completes.
func TestACPClientGoneWaits(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("bash", `{"command":"echo later > later.txt"}`)}},
		llmtest.Turn{Text: "Done later."},
	)
	ctx := testContext(t)
	c := startACP(t, e, "--ask", "bash", "--sandbox", "off")
	c.initialize(ctx)
	id := c.newSession(ctx, e)
	c.setPermit(func(sdk.RequestPermissionRequest) sdk.RequestPermissionResponse {
		_ = c.in.Close() // the editor goes away
		select {
		case <-c.done:
		case <-time.After(e2etest.Patience):
			_ = c.cmd.Process.Signal(syscall.SIGQUIT)
			t.Errorf("agent acp did not stop once the editor left")
		}
		return sdk.RequestPermissionResponse{Outcome: sdk.NewRequestPermissionOutcomeCancelled()}
	})
	// The answer, if the editor were still there to read it, says the
	// turn is over.
	if resp, err := c.prompt(ctx, id, "make later.txt"); err == nil && resp.StopReason != sdk.StopReasonCancelled {
		t.Errorf("stop reason %q once the editor left, want cancelled", resp.StopReason)
	}
	if err := c.cmd.Wait(); err != nil {
		t.Fatalf("agent acp after the editor left: %v", err)
	}
	runs := sessionRuns(t, e, id)
	if len(runs) != 1 || runs[0].Status != event.StatusWaiting {
		t.Fatalf("runs %+v: want one waiting", runs)
	}
	if r := e.Run("approve", runs[0].ID, "--resume", "--json"); r.Code != 0 {
		t.Fatalf("agent approve --resume: exit %d: %s", r.Code, r.Stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(e.Workspace, "later.txt")); string(b) != "later\n" {
		t.Errorf("later.txt %q", b)
	}
	if runs = sessionRuns(t, e, id); runs[0].Status != event.StatusCompleted {
		t.Errorf("run %s after approve --resume", runs[0].Status)
	}
}

// TestACPRefusals: bad input gets a clear error and loses nothing: a
// relative cwd, MCP servers the operator did not allow, a prompt to a
// session not opened, an image.
func TestACPRefusals(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t)
	ctx := testContext(t)
	c := startACP(t, e)
	c.initialize(ctx)
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"relative cwd", func() error {
			_, err := c.conn.NewSession(ctx, sdk.NewSessionRequest{Cwd: "ws", McpServers: []sdk.McpServer{}})
			return err
		}, "must be an absolute path"},
		{"editor's MCP servers", func() error {
			_, err := c.conn.NewSession(ctx, sdk.NewSessionRequest{Cwd: e.Workspace, McpServers: []sdk.McpServer{
				{Stdio: &sdk.McpServerStdio{Name: "fs", Command: "mcp-fs", Args: []string{}, Env: []sdk.EnvVariable{}}}}})
			return err
		}, "--allow-client-mcp"},
		{"unknown session", func() error {
			_, err := c.prompt(ctx, "nope", "hi")
			return err
		}, "session/new or session/load it first"},
		{"load of an unknown session", func() error {
			_, err := c.conn.LoadSession(ctx, sdk.LoadSessionRequest{SessionId: "nope", Cwd: e.Workspace, McpServers: []sdk.McpServer{}})
			return err
		}, "no session nope"},
		{"an image that is none", func() error {
			id := c.newSession(ctx, e)
			_, err := c.conn.Prompt(ctx, sdk.PromptRequest{SessionId: id, Prompt: []sdk.ContentBlock{sdk.TextBlock("look"), sdk.ImageBlock("aGk=", "image/png")}})
			return err
		}, "image 1: not a PNG, JPEG, GIF or WebP image"},
		{"audio", func() error {
			id := c.newSession(ctx, e)
			_, err := c.conn.Prompt(ctx, sdk.PromptRequest{SessionId: id, Prompt: []sdk.ContentBlock{sdk.TextBlock("hear"), sdk.AudioBlock("aGk=", "audio/wav")}})
			return err
		}, "does not take audio"},
	} {
		err := tc.call()
		if err == nil || !strings.Contains(errorText(err), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", tc.name, errorText(err), tc.want)
		}
	}
	if e.Srv.RequestCount() != 0 {
		t.Errorf("%d model requests, want none", e.Srv.RequestCount())
	}
}

// errorText is a request error with its data, where agent acp says what
// to change.
func errorText(err error) string {
	var re *sdk.RequestError
	switch {
	case err == nil:
		return "<nil>"
	case errors.As(err, &re):
		b, _ := json.Marshal(re.Data)
		return re.Message + " " + string(b)
	}
	return err.Error()
}

// TestACPHarnessPlan: in the harness mode a prompt is a harness run; the
// editor sees its plan as a plan update, each phase's entry going from
// pending through in_progress to completed, and the phases' tool calls.
func TestACPHarnessPlan(t *testing.T) {
	t.Parallel()
	planArgs := json.RawMessage(`{"objective":"Two notes","phases":[
		{"id":"first","title":"Write one.md","instructions":"Write one.md.","evidence":{"type":"artifact","artifacts":["one.md"]}},
		{"id":"second","title":"Write two.md","instructions":"Write two.md.","depends_on":["first"],"evidence":{"type":"artifact","artifacts":["two.md"]}}]}`)
	turns := []llmtest.Turn{{When: e2etest.PlannerMarker, ToolCalls: []llmtest.Call{{Name: "submit_plan", Arguments: planArgs}}}}
	turns = append(turns, e2etest.ForPhase("first", e2etest.WriteTurn("one.md", "1\n"), llmtest.Turn{Text: "one.md written."})...)
	turns = append(turns, e2etest.ForPhase("second", e2etest.WriteTurn("two.md", "2\n"), llmtest.Turn{Text: "two.md written."})...)
	e := e2etest.NewHarness(t, turns...)
	ctx := testContext(t)
	c := startACP(t, e)
	c.initialize(ctx)
	s, err := c.conn.NewSession(ctx, sdk.NewSessionRequest{Cwd: e.Workspace, McpServers: []sdk.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	if s.Modes == nil || s.Modes.CurrentModeId != "run" || len(s.Modes.AvailableModes) != 2 {
		t.Fatalf("modes %+v: want run (current) and harness", s.Modes)
	}
	if _, err := c.conn.SetSessionMode(ctx, sdk.SetSessionModeRequest{SessionId: s.SessionId, ModeId: "harness"}); err != nil {
		t.Fatalf("session/set_mode: %v", err)
	}
	resp, err := c.prompt(ctx, s.SessionId, "write two notes")
	if err != nil || resp.StopReason != sdk.StopReasonEndTurn {
		t.Fatalf("harness prompt: %v, %v", resp.StopReason, err)
	}
	ups, _ := c.since(0)
	var plans []string
	for _, u := range ups {
		if u["sessionUpdate"] != "plan" {
			continue
		}
		var st []string
		for _, en := range u["entries"].([]any) {
			en := en.(map[string]any)
			st = append(st, fmt.Sprintf("%s=%s", en["content"], en["status"]))
		}
		plans = append(plans, strings.Join(st, ","))
	}
	want := []string{
		"Write one.md=pending,Write two.md=pending",
		"Write one.md=in_progress,Write two.md=pending",
		"Write one.md=completed,Write two.md=pending",
		"Write one.md=completed,Write two.md=in_progress",
		"Write one.md=completed,Write two.md=completed",
	}
	if strings.Join(plans, "\n") != strings.Join(want, "\n") {
		t.Errorf("plan updates:\n%s\nwant:\n%s", strings.Join(plans, "\n"), strings.Join(want, "\n"))
	}
	if got := kinds(ups); strings.Count(got, "tool_call:in_progress") != 3 {
		t.Errorf("updates %q: want the planner's submit_plan and both phases' writes", got)
	}
	runs := sessionRuns(t, e, s.SessionId)
	if len(runs) != 1 || runs[0].Kind != store.KindHarness || runs[0].Status != event.StatusCompleted {
		t.Errorf("runs %+v: want one completed harness run", runs)
	}
}

// TestACPGoneMidAnswer: agent acp is killed (kill -9), the editor closes
// the connection, or agent acp is stopped (SIGTERM), while the model
// answers. The run is left running by a dead process, or recorded
// interrupted as agent acp stopped; a new
// agent acp loads the session (the prompt replayed, and a note that the
// run goes on), and the next prompt first resumes that run to its end,
// then answers the new prompt with it in context.
func TestACPGoneMidAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		leave  func(c *client)
		status string
	}{
		{"kill -9", func(c *client) { _ = c.cmd.Process.Signal(syscall.SIGKILL) }, event.StatusRunning},
		{"editor closed", func(c *client) { _ = c.in.Close() }, event.StatusInterrupted},
		{"SIGTERM", func(c *client) { _ = c.cmd.Process.Signal(syscall.SIGTERM) }, event.StatusInterrupted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			gate := make(chan struct{})
			e := e2etest.New(t,
				llmtest.Turn{Text: "never sent", Gate: gate},
				llmtest.Turn{Text: "The first answer, resumed."},
				llmtest.Turn{Text: "And the second."},
			)
			defer close(gate)
			ctx := testContext(t)
			c := startACP(t, e)
			c.initialize(ctx)
			id := c.newSession(ctx, e)
			go func() { _, _ = c.prompt(ctx, id, "answer me") }()
			e2etest.WaitFor(t, "the model to be asked", func() bool { return e.Srv.RequestCount() == 1 })
			tc.leave(c)
			<-c.done
			_ = c.cmd.Wait()
			runs := sessionRuns(t, e, id)
			if len(runs) != 1 || runs[0].Status != tc.status {
				t.Fatalf("runs after the editor left: %+v; want one %s", runs, tc.status)
			}

			c2 := startACP(t, e)
			c2.initialize(ctx)
			if _, err := c2.conn.LoadSession(ctx, sdk.LoadSessionRequest{SessionId: id, Cwd: e.Workspace, McpServers: []sdk.McpServer{}}); err != nil {
				t.Fatalf("session/load: %v", err)
			}
			ups, n := c2.since(0)
			if got := kinds(ups); !strings.HasPrefix(got, "user_message_chunk") || !strings.Contains(text(ups, "agent_thought_chunk"), "left unfinished, "+tc.status) {
				t.Fatalf("replayed %q: %v", got, ups)
			}
			resp, err := c2.prompt(ctx, id, "and then?")
			if err != nil || resp.StopReason != sdk.StopReasonEndTurn {
				t.Fatalf("prompt after load: %v, %v", resp.StopReason, err)
			}
			ups, _ = c2.since(n)
			if got := text(ups, "agent_message_chunk"); got != "The first answer, resumed.And the second." {
				t.Errorf("answers %q", got)
			}
			runs = sessionRuns(t, e, id)
			if len(runs) != 2 || runs[0].Status != event.StatusCompleted || runs[1].Status != event.StatusCompleted {
				t.Errorf("runs %+v: want the resumed one and the new one completed", runs)
			}
			reqs := e.Srv.Requests()
			if last := string(reqs[len(reqs)-1].Body); !strings.Contains(last, "The first answer, resumed.") {
				t.Errorf("the new run lacks the resumed one's answer in its context: %s", last)
			}
		})
	}
}

// TestACPClientMCP: with --allow-client-mcp, the MCP servers the editor
// passes in session/new are the session's runs' own: the model calls
// their tools as mcp__NAME__TOOL.
func TestACPClientMCP(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("mcp__editor__echo", `{"text":"from the editor's server"}`)}},
		llmtest.Turn{Text: "It echoed."},
	)
	ctx := testContext(t)
	c := startACP(t, e, "--allow-client-mcp")
	c.initialize(ctx)
	s, err := c.conn.NewSession(ctx, sdk.NewSessionRequest{Cwd: e.Workspace, McpServers: []sdk.McpServer{
		{Stdio: &sdk.McpServerStdio{Name: "editor", Command: "mcptest-server", Args: []string{}, Env: []sdk.EnvVariable{}}}}})
	if err != nil {
		t.Fatalf("session/new with an MCP server: %v", err)
	}
	resp, err := c.prompt(ctx, s.SessionId, "echo something")
	if err != nil || resp.StopReason != sdk.StopReasonEndTurn {
		t.Fatalf("prompt: %v, %v", resp.StopReason, err)
	}
	ups, _ := c.since(0)
	if got := kinds(ups); !strings.HasPrefix(got, "tool_call:in_progress tool_call_update:completed") {
		t.Fatalf("updates %q: %v", got, ups)
	}
	if out := ups[1]["content"].([]any)[0].(map[string]any)["content"].(map[string]any)["text"]; !strings.Contains(fmt.Sprint(out), "from the editor's server") {
		t.Errorf("the MCP tool's output %q", out)
	}
}

// TestACPImage: an image in the prompt (initialize says the agent takes
// them) goes with the run's prompt to a model that sees images, bytes and
// all, as --image's do.
func TestACPImage(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, llmtest.Turn{Text: "A red square."})
	if err := os.MkdirAll(e.Home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.Home, "config.toml"), []byte("vision = true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	img := image.NewRGBA(image.Rect(0, 0, 4, 4))
	for x := range 4 {
		for y := range 4 {
			img.Set(x, y, color.RGBA{R: 255, A: 255})
		}
	}
	var png64 strings.Builder
	enc := base64.NewEncoder(base64.StdEncoding, &png64)
	if err := png.Encode(enc, img); err != nil {
		t.Fatal(err)
	}
	enc.Close()
	ctx := testContext(t)
	c := startACP(t, e)
	if init := c.initialize(ctx); !init.AgentCapabilities.PromptCapabilities.Image {
		t.Fatalf("initialize: promptCapabilities %+v, want image", init.AgentCapabilities.PromptCapabilities)
	}
	id := c.newSession(ctx, e)
	resp, err := c.conn.Prompt(ctx, sdk.PromptRequest{SessionId: id, Prompt: []sdk.ContentBlock{sdk.TextBlock("what is this?"), sdk.ImageBlock(png64.String(), "image/png")}})
	if err != nil || resp.StopReason != sdk.StopReasonEndTurn {
		t.Fatalf("prompt with an image: %v, %v", resp.StopReason, err)
	}
	body := string(e.Srv.Requests()[0].Body)
	if !strings.Contains(body, "image_url") || !strings.Contains(body, png64.String()[:40]) {
		t.Errorf("the model was not given the image: %s", body)
	}
}
