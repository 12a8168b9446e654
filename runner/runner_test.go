package runner_test

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"agent/event"
	"agent/llm"
	"agent/llm/llmtest"
	"agent/runner"
	"agent/tools"
)

// recSink records every event. EmitFunc, if set, sees each event first
// and may fail it.
type recSink struct {
	EmitFunc func(e event.Event) error

	mu     sync.Mutex
	events []event.Event
}

func (s *recSink) Emit(ctx context.Context, e event.Event) error {
	if s.EmitFunc != nil {
		if err := s.EmitFunc(e); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, e)
	return nil
}

func (s *recSink) Events() []event.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events)
}

// Of returns the events of type typ.
func (s *recSink) Of(typ string) []event.Event {
	var out []event.Event
	for _, e := range s.Events() {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// Types returns the event types in order, with runs of message.delta
// collapsed into one (how text is chunked is the server's business).
func (s *recSink) Types() []string {
	var out []string
	for _, e := range s.Events() {
		if e.Type == event.MessageDelta && len(out) > 0 && out[len(out)-1] == event.MessageDelta {
			continue
		}
		out = append(out, e.Type)
	}
	return out
}

// fakeModel is an llm.Model whose answers come from StreamFunc. It
// records every request.
type fakeModel struct {
	StreamFunc func(ctx context.Context, req llm.Request, onText func(string)) (*llm.Response, error)

	mu   sync.Mutex
	reqs []llm.Request
}

func (m *fakeModel) Stream(ctx context.Context, req llm.Request, onText func(string)) (*llm.Response, error) {
	m.mu.Lock()
	req.Messages = slices.Clone(req.Messages)
	m.reqs = append(m.reqs, req)
	m.mu.Unlock()
	return m.StreamFunc(ctx, req, onText)
}

func (m *fakeModel) Requests() []llm.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.reqs)
}

// replies answers the n-th request with the n-th response and fails the
// test on a request it has no answer for.
func replies(t *testing.T, rs ...llm.Response) *fakeModel {
	t.Helper()
	m := &fakeModel{}
	m.StreamFunc = func(ctx context.Context, req llm.Request, onText func(string)) (*llm.Response, error) {
		n := len(m.Requests())
		if n > len(rs) {
			t.Errorf("unexpected model call %d (scripted %d)", n, len(rs))
			return nil, errors.New("fake model: script exhausted")
		}
		r := rs[n-1]
		if r.Message.Content != "" && onText != nil {
			onText(r.Message.Content)
		}
		return &r, nil
	}
	return m
}

// forever answers every request with next(n), n counting from 1.
func forever(next func(n int) llm.Response) *fakeModel {
	m := &fakeModel{}
	m.StreamFunc = func(ctx context.Context, req llm.Request, onText func(string)) (*llm.Response, error) {
		r := next(len(m.Requests()))
		return &r, nil
	}
	return m
}

func calls(cs ...llm.ToolCall) llm.Response {
	return llm.Response{
		Message:      llm.Message{Role: llm.RoleAssistant, ToolCalls: cs},
		FinishReason: "tool_calls",
		Usage:        llm.Usage{PromptTokens: 10, CompletionTokens: 1},
	}
}

func final(text string) llm.Response {
	return llm.Response{
		Message:      llm.Message{Role: llm.RoleAssistant, Content: text},
		FinishReason: "stop",
		Usage:        llm.Usage{PromptTokens: 10, CompletionTokens: 1},
	}
}

func tc(id, name, args string) llm.ToolCall {
	return llm.ToolCall{ID: id, Name: name, Arguments: args}
}

// bashCall is a bash call's arguments for command.
func bashArgs(command string) string {
	b, _ := json.Marshal(map[string]string{"command": command})
	return string(b)
}

// newTools returns the builtin tools over a fresh workspace and its root.
func newTools(t *testing.T) (*tools.Set, string) {
	t.Helper()
	ws, err := tools.NewWorkspace(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	set, err := tools.NewSet(ws, tools.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return set, ws.Root()
}

// newClient returns a real client for a scripted fake server.
func newClient(t *testing.T, turns ...llmtest.Turn) (*llm.Client, *llmtest.Server) {
	t.Helper()
	srv := llmtest.NewServer(t, llmtest.Script{Turns: turns})
	c, err := llm.New(llm.Config{
		BaseURL:     srv.URL(),
		MaxAttempts: 1,
		Sleep:       func(context.Context, time.Duration) error { return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	return c, srv
}

func decode[T any](t *testing.T, e event.Event) T {
	t.Helper()
	var v T
	if err := e.Decode(&v); err != nil {
		t.Fatalf("%s: %v", e.Type, err)
	}
	return v
}

// toolResults returns the tool.completed data by call id.
func toolResults(t *testing.T, s *recSink) map[string]event.ToolCompletedData {
	t.Helper()
	out := map[string]event.ToolCompletedData{}
	for _, e := range s.Of(event.ToolCompleted) {
		d := decode[event.ToolCompletedData](t, e)
		if _, dup := out[d.CallID]; dup {
			t.Errorf("two tool.completed for call %s", d.CallID)
		}
		out[d.CallID] = d
	}
	return out
}

func startedIDs(t *testing.T, s *recSink) []string {
	t.Helper()
	var ids []string
	for _, e := range s.Of(event.ToolStarted) {
		ids = append(ids, decode[event.ToolStartedData](t, e).CallID)
	}
	return ids
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func TestRunToolCallThenAnswer(t *testing.T) {
	t.Parallel()
	model, srv := newClient(t,
		llmtest.Turn{
			Text:      "I will write the file.",
			ToolCalls: []llmtest.Call{{ID: "w1", Name: "write_file", Arguments: json.RawMessage(`{"path":"hello.txt","content":"hi\n"}`)}},
			Usage:     &llmtest.Usage{PromptTokens: 100, CompletionTokens: 20},
		},
		llmtest.Turn{Text: "Wrote hello.txt.", Usage: &llmtest.Usage{PromptTokens: 150, CompletionTokens: 5}},
	)
	set, root := newTools(t)
	sink := &recSink{}
	sink.EmitFunc = func(e event.Event) error {
		// tool.started must reach the sink before the tool has any effect.
		if e.Type == event.ToolStarted && fileExists(filepath.Join(root, "hello.txt")) {
			t.Error("hello.txt already exists when tool.started is emitted")
		}
		return nil
	}

	res, err := runner.Run(context.Background(), runner.Config{Model: model, ModelName: "m", Tools: set, Sink: sink}, "say hi in hello.txt", runner.State{})
	if err != nil {
		t.Fatal(err)
	}

	want := runner.Result{
		Status: event.StatusCompleted, Text: "Wrote hello.txt.", Reason: event.ReasonCompleted, Turns: 2,
		Usage: llm.Usage{PromptTokens: 250, CompletionTokens: 25},
	}
	if res != want {
		t.Errorf("result = %+v, want %+v", res, want)
	}
	if got := readFile(t, filepath.Join(root, "hello.txt")); got != "hi\n" {
		t.Errorf("hello.txt = %q", got)
	}

	wantTypes := []string{
		event.MessageCompleted, // user
		event.MessageDelta,
		event.MessageCompleted, // assistant with the call
		event.ToolStarted,
		event.ToolCompleted,
		event.ArtifactCreated,
		event.MessageDelta,
		event.MessageCompleted, // final answer
	}
	if got := sink.Types(); !slices.Equal(got, wantTypes) {
		t.Fatalf("event types:\n got %v\nwant %v", got, wantTypes)
	}

	msgs := sink.Of(event.MessageCompleted)
	user := decode[event.MessageData](t, msgs[0])
	if user.Role != "user" || user.Text != "say hi in hello.txt" {
		t.Errorf("first message = %+v", user)
	}
	asst := decode[event.MessageData](t, msgs[1])
	if asst.Role != "assistant" || asst.Text != "I will write the file." ||
		len(asst.ToolCalls) != 1 || asst.ToolCalls[0].Name != "write_file" || asst.ToolCalls[0].ID != "w1" {
		t.Errorf("assistant message = %+v", asst)
	}
	if asst.Usage == nil || *asst.Usage != (event.Usage{PromptTokens: 100, CompletionTokens: 20}) {
		t.Errorf("assistant usage = %+v", asst.Usage)
	}
	if last := decode[event.MessageData](t, msgs[2]); last.Text != "Wrote hello.txt." || len(last.ToolCalls) != 0 {
		t.Errorf("final message = %+v", last)
	}

	var streamed strings.Builder
	for _, e := range sink.Of(event.MessageDelta) {
		streamed.WriteString(decode[event.MessageDeltaData](t, e).Text)
	}
	if got := streamed.String(); got != "I will write the file.Wrote hello.txt." {
		t.Errorf("streamed text = %q", got)
	}

	started := decode[event.ToolStartedData](t, sink.Of(event.ToolStarted)[0])
	if started.CallID != "w1" || started.Name != "write_file" || !json.Valid(started.Args) {
		t.Errorf("tool.started = %+v", started)
	}
	done := decode[event.ToolCompletedData](t, sink.Of(event.ToolCompleted)[0])
	if done.CallID != "w1" || !done.OK || done.Error != "" {
		t.Errorf("tool.completed = %+v", done)
	}
	sum := sha256.Sum256([]byte("hi\n"))
	art := decode[event.ArtifactData](t, sink.Of(event.ArtifactCreated)[0])
	if want := (event.ArtifactData{Path: "hello.txt", SHA256: hex.EncodeToString(sum[:]), Bytes: 3}); art != want {
		t.Errorf("artifact = %+v, want %+v", art, want)
	}

	// The second request carries the whole conversation, with the tool
	// result answering the call.
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("model calls = %d, want 2", len(reqs))
	}
	if names := reqs[0].ToolNames(); !slices.Contains(names, "write_file") || !slices.Contains(names, "bash") {
		t.Errorf("tools offered = %v", names)
	}
	var roles []string
	for _, m := range reqs[1].Messages() {
		roles = append(roles, m.Role)
	}
	if want := []string{"system", "user", "assistant", "tool"}; !slices.Equal(roles, want) {
		t.Errorf("second request roles = %v, want %v", roles, want)
	}
	if last := reqs[1].LastMessage(); last.ToolCallID != "w1" || last.Content != done.Output {
		t.Errorf("tool message = %+v, want the tool.completed output %q", last, done.Output)
	}
}

func TestRunMaxTurns(t *testing.T) {
	t.Parallel()
	tests := []struct {
		maxTurns, wantCalls int
	}{
		{1, 1},
		{3, 3},
		{0, runner.DefaultMaxTurns},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.maxTurns), func(t *testing.T) {
			t.Parallel()
			// Always another call, each different so the loop guard stays out of it.
			model := forever(func(n int) llm.Response {
				r := calls(tc(fmt.Sprint("c", n), "list_files", fmt.Sprintf(`{"pattern":"*.%d"}`, n)))
				r.Message.Content = fmt.Sprintf("step %d", n)
				return r
			})
			set, _ := newTools(t)
			sink := &recSink{}
			res, err := runner.Run(context.Background(), runner.Config{Model: model, Tools: set, Sink: sink, MaxTurns: tt.maxTurns}, "loop", runner.State{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != event.StatusFailed || res.Reason != event.ReasonMaxTurns {
				t.Errorf("result = %+v, want failed/max_turns", res)
			}
			if got := len(model.Requests()); got != tt.wantCalls {
				t.Errorf("model calls = %d, want %d", got, tt.wantCalls)
			}
			if res.Turns != tt.wantCalls {
				t.Errorf("turns = %d, want %d", res.Turns, tt.wantCalls)
			}
			if want := fmt.Sprintf("step %d", tt.wantCalls); res.Text != want {
				t.Errorf("text = %q, want the last assistant text %q", res.Text, want)
			}
			if got := len(sink.Of(event.ToolCompleted)); got != tt.wantCalls {
				t.Errorf("tool results = %d, want every call answered (%d)", got, tt.wantCalls)
			}
		})
	}
}

func TestRunLoopGuard(t *testing.T) {
	t.Parallel()
	appendX := bashArgs("echo x >> count.txt")
	// Its output changes each time, as a clock's or a polled status does.
	countX := bashArgs("echo x >> count.txt; wc -l < count.txt")
	readA := `{"path":"a.txt"}`
	tests := []struct {
		name       string
		tool       string   // bash unless set
		args       []string // one call per model turn; past the end the model answers "ok"
		maxRepeats int
		wantLines  int   // lines in count.txt: how many bash calls really ran
		refused    []int // 1-based turns whose call is refused
		warned     []int // 1-based turns whose result says the run stops soon
		wantRes    runner.Result
	}{
		{
			name:    "identical calls are refused then stopped",
			tool:    "read_file",
			args:    []string{readA, readA, readA, readA, readA, readA},
			refused: []int{3, 4},
			wantRes: runner.Result{Status: event.StatusFailed, Reason: event.ReasonToolLoop, Turns: 5},
		},
		{
			name: "formatting differences do not make a call new",
			tool: "read_file",
			args: []string{
				readA,
				`{ "path" : "a.txt" }`,
				"{\n  \"path\": \"a.txt\"\n}",
				readA,
			},
			refused: []int{3, 4},
			wantRes: runner.Result{Status: event.StatusCompleted, Reason: event.ReasonCompleted, Text: "ok", Turns: 5},
		},
		{
			name:       "the limit is the run's",
			tool:       "read_file",
			args:       []string{readA, readA, readA, readA},
			maxRepeats: 3,
			refused:    []int{2},
			wantRes:    runner.Result{Status: event.StatusFailed, Reason: event.ReasonToolLoop, Turns: 3},
		},
		{
			name:      "a command with the same result each time runs, then stops",
			args:      []string{appendX, appendX, appendX, appendX, appendX, appendX},
			wantLines: 5,
			warned:    []int{3, 4},
			wantRes:   runner.Result{Status: event.StatusFailed, Reason: event.ReasonToolLoop, Turns: 5},
		},
		{
			name:      "a command whose result changes is polled on",
			args:      []string{countX, countX, countX, countX, countX, countX, countX},
			wantLines: 7,
			wantRes:   runner.Result{Status: event.StatusCompleted, Reason: event.ReasonCompleted, Text: "ok", Turns: 8},
		},
		{
			name:      "a different call in between resets the count",
			args:      []string{appendX, appendX, bashArgs("echo y > other.txt"), appendX, appendX},
			wantLines: 4,
			wantRes:   runner.Result{Status: event.StatusCompleted, Reason: event.ReasonCompleted, Text: "ok", Turns: 6},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tool := cmp.Or(tt.tool, "bash")
			model := forever(func(n int) llm.Response {
				if n > len(tt.args) {
					return final("ok")
				}
				return calls(tc(fmt.Sprint("c", n), tool, tt.args[n-1]))
			})
			set, root := newTools(t)
			if err := os.WriteFile(filepath.Join(root, "a.txt"), []byte("alpha\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			sink := &recSink{}
			res, err := runner.Run(context.Background(), runner.Config{Model: model, Tools: set, Sink: sink, MaxRepeats: tt.maxRepeats}, "count", runner.State{})
			if err != nil {
				t.Fatal(err)
			}
			res.Usage = llm.Usage{}
			if res != tt.wantRes {
				t.Errorf("result = %+v, want %+v", res, tt.wantRes)
			}
			if tool == "bash" {
				if got := strings.Count(readFile(t, filepath.Join(root, "count.txt")), "x\n"); got != tt.wantLines {
					t.Errorf("count.txt has %d lines, want %d", got, tt.wantLines)
				}
			}
			results := toolResults(t, sink)
			for n := 1; n <= min(len(tt.args), tt.wantRes.Turns); n++ {
				id := fmt.Sprint("c", n)
				r, ok := results[id]
				isRefused, isWarned := slices.Contains(tt.refused, n), slices.Contains(tt.warned, n)
				switch {
				case tool != "bash" && tt.wantRes.Reason == event.ReasonToolLoop && n == tt.wantRes.Turns:
					// Never run, but answered, so a resumed conversation is well formed.
					if slices.Contains(startedIDs(t, sink), id) || !ok || r.OK || !strings.HasPrefix(r.Output, "stopped:") {
						t.Errorf("call %d, which stopped the loop: started or not answered 'stopped': %+v", n, r)
					}
				case !ok:
					t.Errorf("call %d has no result", n)
				case isRefused && (r.OK || !strings.Contains(r.Output, "refused")):
					t.Errorf("call %d = %+v, want refused", n, r)
				case !isRefused && !r.OK:
					t.Errorf("call %d failed: %+v", n, r)
				case isWarned != strings.Contains(r.Output, "same result"):
					t.Errorf("call %d = %q: warned %v, want %v", n, r.Output, !isWarned, isWarned)
				}
			}
		})
	}
}

func TestRunBadToolCallsAreResults(t *testing.T) {
	t.Parallel()
	const badJSON = `{"path": "a.txt", "content": `
	model, srv := newClient(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{
			{ID: "bad", Name: "write_file", RawArguments: badJSON},
			{ID: "unknown", Name: "frobnicate", Arguments: json.RawMessage(`{"x":1}`)},
		}},
		llmtest.Turn{Text: "Sorry, I could not."},
	)
	set, root := newTools(t)
	sink := &recSink{}
	res, err := runner.Run(context.Background(), runner.Config{Model: model, Tools: set, Sink: sink}, "try", runner.State{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != event.StatusCompleted || res.Text != "Sorry, I could not." {
		t.Errorf("result = %+v, want completed after the errors", res)
	}
	if fileExists(filepath.Join(root, "a.txt")) {
		t.Error("a.txt was written from invalid arguments")
	}

	started := map[string]event.ToolStartedData{}
	for _, e := range sink.Of(event.ToolStarted) {
		d := decode[event.ToolStartedData](t, e)
		started[d.CallID] = d
	}
	// Invalid arguments travel as a JSON string, so the event stream stays valid.
	var s string
	if err := json.Unmarshal(started["bad"].Args, &s); err != nil || s != badJSON {
		t.Errorf("tool.started args for invalid JSON = %s, want the raw text as a JSON string", started["bad"].Args)
	}
	if _, err := json.Marshal(sink.Events()); err != nil {
		t.Errorf("events do not marshal: %v", err)
	}

	results := toolResults(t, sink)
	for id, want := range map[string]string{"bad": "invalid arguments", "unknown": "unknown tool"} {
		r := results[id]
		if r.OK || !strings.Contains(r.Output, want) || r.Error == "" {
			t.Errorf("result of %s = %+v, want an error mentioning %q", id, r, want)
		}
	}

	// The model saw both errors as tool results.
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("model calls = %d, want 2", len(reqs))
	}
	var got []string
	for _, m := range reqs[1].Messages() {
		if m.Role == "tool" {
			got = append(got, m.ToolCallID)
		}
	}
	if want := []string{"bad", "unknown"}; !slices.Equal(got, want) {
		t.Errorf("tool messages = %v, want %v", got, want)
	}
}

func TestRunEmptyArgumentsAreAnEmptyObject(t *testing.T) {
	t.Parallel()
	model := replies(t, calls(tc("l", "list_files", "")), final("empty"))
	set, _ := newTools(t)
	sink := &recSink{}
	if _, err := runner.Run(context.Background(), runner.Config{Model: model, Tools: set, Sink: sink}, "list", runner.State{}); err != nil {
		t.Fatal(err)
	}
	if d := decode[event.ToolStartedData](t, sink.Of(event.ToolStarted)[0]); string(d.Args) != "{}" {
		t.Errorf("args = %s, want {}", d.Args)
	}
	if r := toolResults(t, sink)["l"]; !r.OK {
		t.Errorf("list_files with no arguments failed: %+v", r)
	}
}

func TestRunSinkFailureStopsBeforeTheTool(t *testing.T) {
	t.Parallel()
	errDisk := errors.New("disk full")
	model := replies(t, calls(tc("w", "write_file", `{"path":"a.txt","content":"x"}`)))
	set, root := newTools(t)
	sink := &recSink{EmitFunc: func(e event.Event) error {
		if e.Type == event.ToolStarted {
			return errDisk
		}
		return nil
	}}
	_, err := runner.Run(context.Background(), runner.Config{Model: model, Tools: set, Sink: sink}, "write", runner.State{})
	if !errors.Is(err, errDisk) {
		t.Fatalf("err = %v, want %v", err, errDisk)
	}
	if fileExists(filepath.Join(root, "a.txt")) {
		t.Error("the tool ran although tool.started could not be recorded")
	}
}

func TestRunRalphLoop(t *testing.T) {
	t.Parallel()
	model, srv := newClient(t,
		// Iteration 1: the promise shows up in a tool output and inside a
		// sentence; neither completes.
		llmtest.Turn{ToolCalls: []llmtest.Call{{Name: "bash", Arguments: json.RawMessage(`{"command":"echo DONE"}`)}}},
		llmtest.Turn{Text: "The tests print DONE but I am not finished."},
		// Iteration 2: a fresh conversation, completed by the tagged promise.
		llmtest.Turn{Text: "Verified everything.\n<promise>DONE</promise>"},
	)
	set, _ := newTools(t)
	sink := &recSink{}
	cfg := runner.Config{Model: model, Tools: set, Sink: sink, Until: "DONE", MaxIterations: 3}
	res, err := runner.Run(context.Background(), cfg, "Make the tests pass", runner.State{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != event.StatusCompleted || res.Reason != event.ReasonCompleted || res.Turns != 3 {
		t.Errorf("result = %+v, want completed in 3 turns", res)
	}
	if !strings.Contains(res.Text, "<promise>DONE</promise>") {
		t.Errorf("text = %q", res.Text)
	}

	var its []event.IterationData
	var kinds []string
	for _, e := range sink.Events() {
		if e.Type == event.IterationStarted || e.Type == event.IterationCompleted {
			kinds = append(kinds, e.Type)
			its = append(its, decode[event.IterationData](t, e))
		}
	}
	wantKinds := []string{event.IterationStarted, event.IterationCompleted, event.IterationStarted, event.IterationCompleted}
	if !slices.Equal(kinds, wantKinds) {
		t.Fatalf("iteration events = %v, want %v", kinds, wantKinds)
	}
	for i, d := range its {
		if want := i/2 + 1; d.Iteration != want || d.MaxIterations != 3 || d.Promise != "DONE" {
			t.Errorf("iteration event %d = %+v, want iteration %d of 3", i, d, want)
		}
	}
	if its[1].Completed || its[1].Reason == "" {
		t.Errorf("iteration 1 = %+v, want not completed with a reason", its[1])
	}
	if !its[3].Completed {
		t.Errorf("iteration 2 = %+v, want completed", its[3])
	}

	reqs := srv.Requests()
	if len(reqs) != 3 {
		t.Fatalf("model calls = %d, want 3", len(reqs))
	}
	if sys := reqs[0].Messages()[0]; sys.Role != "system" || !strings.Contains(sys.Content, "\nDONE\n") {
		t.Errorf("system prompt does not state the promise on its own line:\n%s", sys.Content)
	}
	// Iteration 2 starts from the system prompt and the continuation only.
	msgs := reqs[2].Messages()
	if len(msgs) != 2 || msgs[0].Role != "system" || msgs[1].Role != "user" {
		t.Fatalf("iteration 2 request = %+v, want system + continuation", msgs)
	}
	for _, want := range []string{"Make the tests pass", "iteration 2 of 3", "\nDONE"} {
		if !strings.Contains(msgs[1].Content, want) {
			t.Errorf("continuation lacks %q:\n%s", want, msgs[1].Content)
		}
	}
	for _, m := range msgs {
		if strings.Contains(m.Content, "not finished") {
			t.Errorf("iteration 1's conversation leaked into iteration 2: %q", m.Content)
		}
	}
	// Messages are tagged with their iteration.
	for _, e := range sink.Of(event.MessageCompleted) {
		d := decode[event.MessageData](t, e)
		want := 1
		if strings.Contains(d.Text, "iteration 2 of 3") || strings.Contains(d.Text, "Verified") {
			want = 2
		}
		if d.Iteration != want {
			t.Errorf("message %q has iteration %d, want %d", d.Text, d.Iteration, want)
		}
	}
}

func TestRunRalphLoopCompletesOnBarePromiseLine(t *testing.T) {
	t.Parallel()
	model := replies(t, final("All done.\n  SHIP IT  \n"))
	set, _ := newTools(t)
	res, err := runner.Run(context.Background(), runner.Config{Model: model, Tools: set, Sink: &recSink{}, Until: "SHIP IT"}, "ship", runner.State{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != event.StatusCompleted || res.Turns != 1 {
		t.Errorf("result = %+v, want completed in one turn", res)
	}
}

func TestRunRalphLoopRunsOut(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			model := forever(func(int) llm.Response { return final("still working, not DONE") })
			set, _ := newTools(t)
			sink := &recSink{}
			res, err := runner.Run(context.Background(), runner.Config{Model: model, Tools: set, Sink: sink, Until: "DONE", MaxIterations: n}, "work", runner.State{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != event.StatusFailed || res.Reason != event.ReasonMaxIterations {
				t.Errorf("result = %+v, want failed/max_iterations", res)
			}
			if got := len(model.Requests()); got != n {
				t.Errorf("model calls = %d, want %d", got, n)
			}
			if got := len(sink.Of(event.IterationStarted)); got != n {
				t.Errorf("iterations started = %d, want %d", got, n)
			}
			done := sink.Of(event.IterationCompleted)
			if len(done) != n {
				t.Fatalf("iterations completed = %d, want %d", len(done), n)
			}
			for _, e := range done {
				if d := decode[event.IterationData](t, e); d.Completed {
					t.Errorf("iteration %d marked completed", d.Iteration)
				}
			}
		})
	}
}

func TestRunContextBudget(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		until          string
		promptTokens   int
		wantRequests   int
		wantIterations int
	}{
		{"over budget starts a fresh iteration", "DONE", 1500, 2, 2},
		{"under budget keeps going", "DONE", 500, 2, 1},
		{"over budget without a promise also starts fresh", "", 1500, 2, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			model, srv := newClient(t,
				llmtest.Turn{
					ToolCalls: []llmtest.Call{{ID: "l1", Name: "list_files", Arguments: json.RawMessage(`{}`)}},
					Usage:     &llmtest.Usage{PromptTokens: tt.promptTokens, CompletionTokens: 5},
				},
				llmtest.Turn{Text: "DONE", Usage: &llmtest.Usage{PromptTokens: 100, CompletionTokens: 1}},
			)
			set, _ := newTools(t)
			sink := &recSink{}
			cfg := runner.Config{Model: model, Tools: set, Sink: sink, Until: tt.until, MaxIterations: 3, ContextBudget: 1000}
			res, err := runner.Run(context.Background(), cfg, "objective", runner.State{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != event.StatusCompleted {
				t.Errorf("result = %+v, want completed", res)
			}
			if r := toolResults(t, sink)["l1"]; !r.OK {
				t.Errorf("the call of the over-budget turn did not run: %+v", r)
			}
			reqs := srv.Requests()
			if len(reqs) != tt.wantRequests {
				t.Fatalf("model calls = %d, want %d", len(reqs), tt.wantRequests)
			}
			if got := len(sink.Of(event.IterationStarted)); got != tt.wantIterations {
				t.Errorf("iterations = %d, want %d", got, tt.wantIterations)
			}
			msgs := reqs[1].Messages()
			if tt.wantIterations == 2 {
				if len(msgs) != 2 {
					t.Errorf("second request has %d messages, want a fresh start (system + continuation)", len(msgs))
				}
				d := decode[event.IterationData](t, sink.Of(event.IterationCompleted)[0])
				if d.Completed || d.Reason != event.ReasonContextBudget {
					t.Errorf("iteration 1 = %+v, want ended by %s", d, event.ReasonContextBudget)
				}
			} else if len(msgs) != 4 {
				t.Errorf("second request has %d messages, want the conversation continued (4)", len(msgs))
			}
		})
	}
}

func TestRunResumeMidTurn(t *testing.T) {
	t.Parallel()
	// The run stopped while running the calls of one assistant message:
	// "done" finished (in one variant), "read", "sh" and "write" had
	// started, "fresh" had not.
	for _, doneFinished := range []bool{true, false} {
		t.Run(fmt.Sprint("first call finished=", doneFinished), func(t *testing.T) {
			t.Parallel()
			set, root := newTools(t)
			if err := os.WriteFile(filepath.Join(root, "r.txt"), []byte("contents of r\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			model := replies(t, final("resumed and finished"))
			sink := &recSink{}
			history := []llm.Message{
				{Role: llm.RoleUser, Content: "do it"},
				{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{
					tc("done", "write_file", `{"path":"done.txt","content":"x"}`),
					tc("read", "read_file", `{"path":"r.txt"}`),
					tc("sh", "bash", bashArgs("echo ran >> sh.txt")),
					tc("write", "write_file", `{"path":"w.txt","content":"x"}`),
					tc("fresh", "bash", bashArgs("echo ran > fresh.txt")),
				}},
			}
			if doneFinished {
				history = append(history, llm.Message{Role: llm.RoleTool, ToolCallID: "done", Content: "wrote 1 bytes to done.txt"})
			}
			state := runner.State{
				History: history,
				Started: []string{"read", "sh", "write"},
				Turns:   1,
				Usage:   llm.Usage{PromptTokens: 7, CompletionTokens: 3},
			}
			res, err := runner.Run(context.Background(), runner.Config{Model: model, Tools: set, Sink: sink}, "do it", state)
			if err != nil {
				t.Fatal(err)
			}
			want := runner.Result{Status: event.StatusCompleted, Text: "resumed and finished", Reason: event.ReasonCompleted,
				Turns: 2, Usage: llm.Usage{PromptTokens: 17, CompletionTokens: 4}}
			if res != want {
				t.Errorf("result = %+v, want %+v", res, want)
			}

			// What ran, as the workspace shows it.
			for file, ran := range map[string]bool{"done.txt": !doneFinished, "sh.txt": false, "w.txt": false, "fresh.txt": true} {
				if got := fileExists(filepath.Join(root, file)); got != ran {
					t.Errorf("%s exists = %v, want %v", file, got, ran)
				}
			}

			results := toolResults(t, sink)
			if r, ok := results["done"]; ok == doneFinished || (ok && !r.OK) {
				t.Errorf("result of done = %+v (emitted %v), want one only if it had none", r, ok)
			}
			if r := results["read"]; !r.OK || !strings.Contains(r.Output, "contents of r") {
				t.Errorf("read-only call was not re-run: %+v", r)
			}
			for _, id := range []string{"sh", "write"} {
				if r := results[id]; r.OK || !strings.HasPrefix(r.Output, "interrupted") {
					t.Errorf("result of interrupted %s = %+v, want an error starting with \"interrupted\"", id, r)
				}
			}
			if r := results["fresh"]; !r.OK {
				t.Errorf("call without a result was not run: %+v", r)
			}
			for _, id := range startedIDs(t, sink) {
				if id == "sh" || id == "write" || (id == "done" && doneFinished) {
					t.Errorf("tool.started for %s, which must not run again", id)
				}
			}
			// No new user message: the prompt is already in the history.
			for _, e := range sink.Of(event.MessageCompleted) {
				if d := decode[event.MessageData](t, e); d.Role == "user" {
					t.Errorf("resume re-sent the prompt: %+v", d)
				}
			}

			reqs := model.Requests()
			if len(reqs) != 1 {
				t.Fatalf("model calls = %d, want 1", len(reqs))
			}
			var answered []string
			for _, m := range reqs[0].Messages {
				if m.Role == llm.RoleTool {
					answered = append(answered, m.ToolCallID)
				}
			}
			if want := []string{"done", "read", "sh", "write", "fresh"}; !slices.Equal(answered, want) {
				t.Errorf("tool results sent to the model = %v, want every call answered once, in order: %v", answered, want)
			}
		})
	}
}

func TestRunResumeAtTurnBoundary(t *testing.T) {
	t.Parallel()
	user := llm.Message{Role: llm.RoleUser, Content: "do it"}
	call := llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{tc("c1", "list_files", `{}`)}}
	tests := []struct {
		name      string
		history   []llm.Message
		wantCalls int
		wantText  string
		wantSent  int // messages in the model request, system prompt included
	}{
		{"after the final answer", []llm.Message{user, {Role: llm.RoleAssistant, Content: "all done"}}, 0, "all done", 0},
		{"after a tool result", []llm.Message{user, call, {Role: llm.RoleTool, ToolCallID: "c1", Content: "(empty)"}}, 1, "fresh answer", 4},
		{"after the user message", []llm.Message{user}, 1, "fresh answer", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var model *fakeModel
			if tt.wantCalls == 0 {
				model = replies(t)
			} else {
				model = replies(t, final("fresh answer"))
			}
			set, _ := newTools(t)
			sink := &recSink{}
			res, err := runner.Run(context.Background(), runner.Config{Model: model, Tools: set, Sink: sink}, "do it",
				runner.State{History: slices.Clone(tt.history), Turns: 1})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != event.StatusCompleted || res.Text != tt.wantText {
				t.Errorf("result = %+v, want completed with %q", res, tt.wantText)
			}
			reqs := model.Requests()
			if len(reqs) != tt.wantCalls {
				t.Fatalf("model calls = %d, want %d", len(reqs), tt.wantCalls)
			}
			if tt.wantCalls > 0 && len(reqs[0].Messages) != tt.wantSent {
				t.Errorf("request has %d messages, want %d: %+v", len(reqs[0].Messages), tt.wantSent, reqs[0].Messages)
			}
			if got := len(sink.Of(event.ToolStarted)); got != 0 {
				t.Errorf("%d tools ran on resume, want none", got)
			}
		})
	}
}

func TestRunCancelledDuringTool(t *testing.T) {
	t.Parallel()
	set, root := newTools(t)
	fifo := filepath.Join(root, "ready.fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	model := replies(t, calls(tc("slow", "bash", bashArgs("echo up > ready.fifo; sleep 600"))))
	sink := &recSink{}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Cancel as soon as the command is running: reading the FIFO returns
	// once the shell has opened and written it.
	go func() {
		os.ReadFile(fifo)
		cancel()
	}()
	t.Cleanup(func() {
		// Release the reader should the shell never have opened the FIFO.
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})

	began := time.Now()
	_, err := runner.Run(ctx, runner.Config{Model: model, Tools: set, Sink: sink}, "wait", runner.State{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if took := time.Since(began); took > time.Minute { // not the sleep's ten minutes, whatever the load
		t.Errorf("Run returned %s after cancel, want promptly", took)
	}
	if ids := startedIDs(t, sink); !slices.Equal(ids, []string{"slow"}) {
		t.Errorf("started = %v, want the bash call", ids)
	}
	if got := sink.Of(event.ToolCompleted); len(got) != 0 {
		t.Errorf("tool.completed emitted for a cancelled call: %s", got[0].Data)
	}
}

func TestHasPromise(t *testing.T) {
	t.Parallel()
	tests := []struct {
		text, promise string
		want          bool
	}{
		{"DONE", "DONE", true},
		{"Work finished.\nDONE", "DONE", true},
		{"Work finished.\nDONE\n", "DONE", true},
		{"DONE\nand then some more text", "DONE", true},
		{"  DONE \t", "DONE", true},
		{"Windows line\r\nDONE\r\n", "DONE", true},
		{"<promise>DONE</promise>", "DONE", true},
		{"All checks pass.\n  <promise>DONE</promise>  ", "DONE", true},
		{"ALL TESTS PASS", " ALL TESTS PASS ", true},
		{"I am DONE", "DONE", false},
		{"DONE.", "DONE", false},
		{"done", "DONE", false},
		{"NOT DONE", "DONE", false},
		{"<promise>DONE</promise> soon", "DONE", false},
		{"<promise> DONE </promise>", "DONE", true},
		{"", "DONE", false},
		{"anything", "", false},
		{"", "", false},
		{"\n", "  ", false},
	}
	for _, tt := range tests {
		if got := runner.HasPromise(tt.text, tt.promise); got != tt.want {
			t.Errorf("HasPromise(%q, %q) = %v, want %v", tt.text, tt.promise, got, tt.want)
		}
	}
}

// A Ralph run resumed right after iteration.started of a later iteration
// (empty history) opens with the continuation prompt, not the original.
func TestRunRalphResumeAtIterationStart(t *testing.T) {
	t.Parallel()
	model, srv := newClient(t, llmtest.Turn{Text: "Checked the files.\nDONE"})
	set, _ := newTools(t)
	res, err := runner.Run(context.Background(), runner.Config{
		Model: model, Tools: set, Sink: &recSink{}, Until: "DONE", MaxIterations: 3,
	}, "build it", runner.State{Iteration: 2})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != event.StatusCompleted {
		t.Fatalf("result = %+v", res)
	}
	msgs := srv.Requests()[0].Messages()
	if len(msgs) != 2 || !strings.Contains(msgs[1].Content, "iteration 2 of 3") || !strings.Contains(msgs[1].Content, "build it") {
		t.Errorf("first request after resume = %+v, want system + continuation for iteration 2", msgs)
	}
}

// The planner's shape: a tool result with Stop ends the loop with its
// output; a plain final message gets reminders first; tool events follow
// the tool's result.
func TestRunStopToolAndRequireTool(t *testing.T) {
	t.Parallel()
	validPlan := json.RawMessage(`{"objective":"o","phases":[{"id":"a","instructions":"do","evidence":{"type":"none"}}]}`)
	badPlan := func(n int) json.RawMessage { // distinct, so the loop guard stays out of it
		return json.RawMessage(fmt.Sprintf(`{"objective":"o%d","phases":[]}`, n))
	}
	tests := []struct {
		name       string
		turns      []llmtest.Turn
		wantStatus string
		wantText   string
		wantReason string
		wantCalls  int
	}{
		{"valid plan ends the loop", []llmtest.Turn{
			{ToolCalls: []llmtest.Call{{Name: "record_learning", Arguments: json.RawMessage(`{"text":"a fact"}`)}}},
			{ToolCalls: []llmtest.Call{{Name: "submit_plan", Arguments: validPlan}}},
		}, event.StatusCompleted, "plan accepted: a", event.ReasonCompleted, 2},
		{"plain replies get two reminders", []llmtest.Turn{
			{Text: "Here is my plan: …"},
			{Text: "Still prose."},
			{ToolCalls: []llmtest.Call{{Name: "submit_plan", Arguments: validPlan}}},
		}, event.StatusCompleted, "plan accepted: a", event.ReasonCompleted, 3},
		{"three plain replies fail", []llmtest.Turn{
			{Text: "one"}, {Text: "two"}, {Text: "three"},
		}, event.StatusFailed, "three", "finished without calling submit_plan", 3},
		{"three invalid plans fail", []llmtest.Turn{
			{ToolCalls: []llmtest.Call{{Name: "submit_plan", Arguments: badPlan(1)}}},
			{ToolCalls: []llmtest.Call{{Name: "submit_plan", Arguments: badPlan(2)}}},
			{ToolCalls: []llmtest.Call{{Name: "submit_plan", Arguments: badPlan(3)}}},
		}, event.StatusFailed, "", "the planner submitted 3 invalid plans", 3},
		// The loop guard does not hide the plan's error.
		{"the same invalid plan three times fails with its error", []llmtest.Turn{
			{ToolCalls: []llmtest.Call{{Name: "submit_plan", Arguments: badPlan(1)}}},
			{ToolCalls: []llmtest.Call{{Name: "submit_plan", Arguments: badPlan(1)}}},
			{ToolCalls: []llmtest.Call{{Name: "submit_plan", Arguments: badPlan(1)}}},
		}, event.StatusFailed, "", "the planner submitted 3 invalid plans; the last: invalid plan: phases", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			model, srv := newClient(t, tt.turns...)
			ws, err := tools.NewWorkspace(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			set, err := tools.NewSet(ws, tools.Options{Allow: []string{"list_files", "record_learning", "submit_plan"}},
				append(tools.RecordTools(), tools.NewSubmitPlan())...)
			if err != nil {
				t.Fatal(err)
			}
			sink := &recSink{}
			res, err := runner.Run(context.Background(), runner.Config{
				Model: model, Tools: set, Sink: sink, RequireTool: tools.SubmitPlanName,
			}, "plan it", runner.State{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != tt.wantStatus || !strings.HasPrefix(res.Reason, tt.wantReason) || (tt.wantText != "" && res.Text != tt.wantText) {
				t.Errorf("result = %+v, want %s %q %q", res, tt.wantStatus, tt.wantReason, tt.wantText)
			}
			if srv.RequestCount() != tt.wantCalls {
				t.Errorf("model calls = %d, want %d", srv.RequestCount(), tt.wantCalls)
			}
			if tt.name == "valid plan ends the loop" {
				types := strings.Join(sink.Types(), ",")
				if !strings.Contains(types, "tool.completed,learning.recorded") {
					t.Errorf("learning.recorded does not follow its tool result: %s", types)
				}
			}
		})
	}
}

// A run in a session sees the session's earlier conversation before its
// own prompt, and records only its own messages.
func TestRunSeesPriorConversation(t *testing.T) {
	t.Parallel()
	model, srv := newClient(t, llmtest.Turn{Text: "You asked about Paris."})
	set, _ := newTools(t)
	sink := &recSink{}
	prior := []llm.Message{
		{Role: llm.RoleUser, Content: "What is the capital of France?"},
		{Role: llm.RoleAssistant, Content: "Paris."},
	}
	if _, err := runner.Run(context.Background(), runner.Config{Model: model, Tools: set, Sink: sink},
		"What did I ask?", runner.State{Prior: prior}); err != nil {
		t.Fatal(err)
	}
	msgs := srv.Requests()[0].Messages()
	if len(msgs) != 4 || msgs[1].Content != prior[0].Content || msgs[2].Content != "Paris." || msgs[3].Content != "What did I ask?" {
		t.Errorf("request = %+v, want system, the prior two, then the prompt", msgs)
	}
	if n := len(sink.Of(event.MessageCompleted)); n != 2 {
		t.Errorf("%d message.completed events, want 2 (this run's own)", n)
	}
}

// A run that ran out of turns, resumed with Continue, gets a fresh turn
// budget for the same conversation instead of stopping at once.
func TestRunContinueFreshTurnBudget(t *testing.T) {
	t.Parallel()
	set, _ := newTools(t)
	history := []llm.Message{{Role: llm.RoleUser, Content: "loop"}}
	for i := range 2 {
		id := fmt.Sprint("c", i)
		history = append(history,
			llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: id, Name: "list_files", Arguments: fmt.Sprintf(`{"pattern":"*.%d"}`, i)}}},
			llm.Message{Role: llm.RoleTool, ToolCallID: id, Content: "no files"})
	}
	for _, cont := range []bool{false, true} {
		t.Run(fmt.Sprint("continue=", cont), func(t *testing.T) {
			t.Parallel()
			model := forever(func(int) llm.Response { return final("done now") })
			res, err := runner.Run(context.Background(), runner.Config{Model: model, Tools: set, Sink: &recSink{}, MaxTurns: 2},
				"loop", runner.State{History: slices.Clone(history), Turns: 2, Continue: cont})
			if err != nil {
				t.Fatal(err)
			}
			wantStatus, wantCalls := event.StatusFailed, 0
			if cont {
				wantStatus, wantCalls = event.StatusCompleted, 1
			}
			if res.Status != wantStatus || len(model.Requests()) != wantCalls {
				t.Errorf("result %+v after %d model calls, want %s after %d", res, len(model.Requests()), wantStatus, wantCalls)
			}
		})
	}
}

// A Ralph loop that ran out of iterations, resumed with Continue, starts
// its next iteration fresh and has MaxIterations more.
func TestRunContinueRalphNextIteration(t *testing.T) {
	t.Parallel()
	set, _ := newTools(t)
	model := forever(func(n int) llm.Response {
		if n < 2 {
			return final("not yet")
		}
		return final("DONE")
	})
	sink := &recSink{}
	state := runner.State{Iteration: 3, Turns: 3, Continue: true, History: []llm.Message{
		{Role: llm.RoleUser, Content: "continue the work"}, {Role: llm.RoleAssistant, Content: "still not done"},
	}}
	res, err := runner.Run(context.Background(), runner.Config{Model: model, Tools: set, Sink: sink, Until: "DONE", MaxIterations: 2},
		"work", state)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != event.StatusCompleted || len(model.Requests()) != 2 {
		t.Fatalf("result %+v after %d calls, want completed after 2", res, len(model.Requests()))
	}
	var started []int
	for _, e := range sink.Of(event.IterationStarted) {
		started = append(started, decode[event.IterationData](t, e).Iteration)
	}
	if !slices.Equal(started, []int{4, 5}) {
		t.Errorf("iterations started %v, want [4 5]", started)
	}
	if first := model.Requests()[0].Messages; len(first) != 2 || !strings.Contains(first[1].Content, "iteration 4") {
		t.Errorf("iteration 4 did not start fresh with the continuation prompt: %+v", first)
	}
}

func TestReport(t *testing.T) {
	t.Parallel()
	provider := &llm.Error{Kind: llm.KindConnection, Err: errors.New("connection refused")}
	tests := []struct {
		name       string
		res        runner.Result
		err        error
		wantStatus string
		wantReason string
	}{
		{"completed", runner.Result{Status: event.StatusCompleted, Reason: event.ReasonCompleted, Text: "ok"}, nil, event.StatusCompleted, event.ReasonCompleted},
		{"max turns", runner.Result{Status: event.StatusFailed, Reason: event.ReasonMaxTurns}, nil, event.StatusFailed, event.ReasonMaxTurns},
		{"provider", runner.Result{}, fmt.Errorf("ask: %w", provider), event.StatusFailed, event.ReasonProvider},
		{"other error", runner.Result{}, errors.New("disk full"), event.StatusFailed, event.ReasonError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := runner.Report(tt.res, tt.err)
			if got.Status != tt.wantStatus || got.Reason != tt.wantReason {
				t.Errorf("Report = %+v, want %s/%s", got, tt.wantStatus, tt.wantReason)
			}
			if tt.wantStatus != event.StatusCompleted && got.Detail == "" {
				t.Errorf("no detail for people: %+v", got)
			}
		})
	}
}
