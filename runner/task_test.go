package runner_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"

	"agent/event"
	"agent/llm"
	"agent/runner"
	"agent/tools"
)

// fakeDelegator answers task calls as answer says, counting how many run
// at once.
type fakeDelegator struct {
	answer func(req event.TaskRequestData) event.TaskResultData

	mu            sync.Mutex
	reqs          []event.TaskRequestData
	running, most int
}

func (d *fakeDelegator) Delegate(ctx context.Context, req event.TaskRequestData) (event.TaskResultData, error) {
	d.mu.Lock()
	d.reqs = append(d.reqs, req)
	d.running++
	d.most = max(d.most, d.running)
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.running--
		d.mu.Unlock()
	}()
	return d.answer(req), nil
}

func taskArgs(prompt string) string {
	b, _ := json.Marshal(map[string]string{"description": "d " + prompt, "prompt": prompt})
	return string(b)
}

func taskTools(t *testing.T) *tools.Set {
	t.Helper()
	ws, err := tools.NewWorkspace(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	set, err := tools.NewSet(ws, tools.Options{}, tools.TaskTool())
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// A reply's task calls run at once, MaxSubagents at a time; each gets an
// equal share of what the budget has left; their results are recorded in
// call order whatever order they end in, and what they spent counts as
// the run's.
func TestRunTasksAtOnceInCallOrder(t *testing.T) {
	t.Parallel()
	// one and two run together (each waits for the other to start); three
	// starts once two ends, and one ends last, once three has.
	oneStarted, twoStarted, threeDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	d := &fakeDelegator{answer: func(req event.TaskRequestData) event.TaskResultData {
		switch req.Prompt {
		case "one":
			close(oneStarted)
			<-twoStarted
			<-threeDone
		case "two":
			close(twoStarted)
			<-oneStarted
		case "three":
			defer close(threeDone)
		}
		return event.TaskResultData{RunID: "sub-" + req.Prompt, Status: event.StatusCompleted, Output: "did " + req.Prompt,
			Usage: event.Usage{PromptTokens: 100, CompletionTokens: 10}}
	}}
	sink := &recSink{}
	res, err := runner.Run(context.Background(), runner.Config{
		Model: replies(t, calls(tc("c1", "task", taskArgs("one")), tc("c2", "task", taskArgs("two")), tc("c3", "task", taskArgs("three"))),
			final("all done")),
		Tools: taskTools(t), Sink: sink, Tasks: d, MaxSubagents: 2, MaxTokens: 1000,
	}, "split it", runner.State{})
	if err != nil || res.Status != event.StatusCompleted {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	if d.most != 2 {
		t.Errorf("%d task calls ran at once, want 2 (MaxSubagents)", d.most)
	}
	for _, req := range d.reqs {
		if req.MaxTokens != (1000-11)/3 || req.Resume {
			t.Errorf("request %+v: want a third of the 989 tokens left, and no resume", req)
		}
	}
	var order []string
	for _, e := range sink.Of(event.ToolCompleted) {
		c := decode[event.ToolCompletedData](t, e)
		order = append(order, c.CallID)
		if c.Subagent != "sub-"+map[string]string{"c1": "one", "c2": "two", "c3": "three"}[c.CallID] || c.Usage == nil || c.Usage.Total() != 110 {
			t.Errorf("tool.completed %+v: want its sub-run and its usage", c)
		}
	}
	if !slices.Equal(order, []string{"c1", "c2", "c3"}) {
		t.Errorf("results recorded in the order %v, want the calls'", order)
	}
	if res.Usage.PromptTokens != 20+300 || res.Usage.CompletionTokens != 2+30 {
		t.Errorf("usage %+v, want the model's and the three sub-runs'", res.Usage)
	}
}

// A started task call of a resumed run is delegated again as a resume;
// a sub-run that parked parks the run once the others are recorded.
func TestRunTasksResumeAndPark(t *testing.T) {
	t.Parallel()
	d := &fakeDelegator{answer: func(req event.TaskRequestData) event.TaskResultData {
		if req.CallID == "c2" {
			return event.TaskResultData{RunID: "sub-2", Status: event.StatusWaiting}
		}
		return event.TaskResultData{RunID: "sub-1", Status: event.StatusCompleted, Output: "did one"}
	}}
	sink := &recSink{}
	history := []llm.Message{
		{Role: llm.RoleUser, Content: "split it"},
		{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{tc("c1", "task", taskArgs("one")), tc("c2", "task", taskArgs("two"))}},
	}
	_, err := runner.Run(context.Background(), runner.Config{Model: replies(t), Tools: taskTools(t), Sink: sink, Tasks: d},
		"split it", runner.State{History: history, Started: []string{"c1"}})
	if err != runner.ErrParked {
		t.Fatalf("Run: %v, want ErrParked", err)
	}
	resumed := map[string]bool{}
	for _, r := range d.reqs {
		resumed[r.CallID] = r.Resume
	}
	if !resumed["c1"] || resumed["c2"] {
		t.Errorf("resume flags %v: want c1 (started before) resumed, c2 new", resumed)
	}
	if got := toolResults(t, sink); len(got) != 1 || got["c1"].Output != "did one" {
		t.Errorf("results %+v: want c1's only, c2 left started", got)
	}
}
