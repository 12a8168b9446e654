package runner

import (
	"context"
	"fmt"

	"agent/event"
	"agent/llm"
	"agent/tools"
)

// Subagents (docs/PROTOCOL.md#subagents): a task call is answered by a
// sub-run, a durable run of its own that only the process keeping the
// store can start, so the loop asks its Delegator. The task calls of one
// reply run at once, up to Config.MaxSubagents; each gets an equal share of
// what the run's budget has left, and what it spent counts as the run's.

// Delegator runs the sub-run of a task call and says how it ended: in
// this process (the supervisor), or through the parent of `agent runner`
// (a task.request). A sub-run that parked on a wait ends "waiting": the
// run parks too. An error stops the loop (ctx ended, the store failed).
type Delegator interface {
	Delegate(ctx context.Context, req event.TaskRequestData) (event.TaskResultData, error)
}

// DefaultMaxSubagents is how many task calls of a reply run at once when
// the run does not say.
const DefaultMaxSubagents = 4

// task is one task call of a batch on its way: started, then delegated.
type task struct {
	call llm.ToolCall
	req  event.TaskRequestData
	done chan taskDone
}

type taskDone struct {
	res event.TaskResultData
	err error
}

// runTasks runs a reply's consecutive task calls that have no result yet
// (done: those that have). Each is begun in order (the loop guard, its
// hooks and approval, its tool.started), then all are delegated at once,
// at most MaxSubagents together; their results are recorded in call
// order, each once it and those before it have one, and each with its
// PostToolUse hooks, whose word for the model it returns. A started call
// of a resumed run goes on with its sub-run (Resume) rather than being
// re-run. It returns a non-empty stop when the loop guard or a hook ends
// the iteration, and ErrParked once the others are recorded if a sub-run
// parked.
func (l *loop) runTasks(ctx context.Context, batch []llm.ToolCall, done map[string]bool) (feedback []string, stop string, err error) {
	var todo []llm.ToolCall
	for _, c := range batch {
		if done[c.ID] {
			feedback = append(feedback, l.recordedFeedback(c))
			continue
		}
		todo = append(todo, c)
	}
	maxTokens, maxCost := l.share(len(todo))
	var tasks []*task
	for _, call := range todo {
		resume := l.wasStarted(call.ID)
		call, repeats, started, stop, err := l.begin(ctx, call)
		if err != nil || stop != "" {
			return feedback, stop, err
		}
		if !started {
			continue
		}
		res, err := l.runCall(ctx, call, repeats) // checks it: Result.Task
		if err != nil {
			return feedback, "", err
		}
		if res.Task == nil {
			said, stop, err := l.finish(ctx, call, res, nil)
			feedback = append(feedback, said)
			if err != nil || stop != "" {
				return feedback, stop, err
			}
			continue
		}
		tasks = append(tasks, &task{call: call, done: make(chan taskDone, 1), req: event.TaskRequestData{
			CallID: call.ID, Description: res.Task.Description, Prompt: res.Task.Prompt, Resume: resume,
			MaxTokens: maxTokens, MaxCost: maxCost,
		}})
	}
	l.delegate(ctx, tasks)
	parked := false
	for _, t := range tasks {
		d := <-t.done
		switch {
		case err != nil || stop != "":
		case d.err != nil:
			err = d.err
		case d.res.Status == event.StatusWaiting:
			parked = true // the others are recorded first
		case ctx.Err() != nil:
			// Stopped: the call stays started, as after a crash, and a
			// resume takes its sub-run's answer.
			err = ctx.Err()
		default:
			var said string
			said, stop, err = l.finish(ctx, t.call, taskResult(d.res), &d.res)
			feedback = append(feedback, said)
		}
	}
	if err == nil && stop == "" && parked {
		err = ErrParked
	}
	return feedback, stop, err
}

// finish records a task call's result (its sub-run's, or why it has none)
// and runs its PostToolUse hooks: what they say to the model, and stop if
// one ends the run.
func (l *loop) finish(ctx context.Context, call llm.ToolCall, res tools.Result, sub *event.TaskResultData) (said, stop string, err error) {
	if sub != nil {
		l.state.Usage.PromptTokens += sub.Usage.PromptTokens
		l.state.Usage.CompletionTokens += sub.Usage.CompletionTokens
	}
	if err := l.record(ctx, call, res, sub); err != nil {
		return "", "", err
	}
	said, halt, err := l.postToolUse(ctx, call, res)
	if halt != "" {
		l.hookStop = halt
		stop = event.ReasonHook
	}
	return said, stop, err
}

// delegate starts the tasks' sub-runs in call order, at most
// MaxSubagents at once: the rest wait their turn. Each task's outcome
// arrives on its done channel.
func (l *loop) delegate(ctx context.Context, tasks []*task) {
	slots := make(chan struct{}, max(1, l.cfg.MaxSubagents))
	go func() {
		for _, t := range tasks {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				t.done <- taskDone{err: ctx.Err()}
				continue
			}
			go func() {
				defer func() { <-slots }()
				res, err := l.cfg.Tasks.Delegate(ctx, t.req)
				t.done <- taskDone{res: res, err: err}
			}()
		}
	}()
}

// taskResult is a task call's result: its sub-run's final answer, or
// how it failed, cut to a tool result's size.
func taskResult(r event.TaskResultData) tools.Result {
	res := tools.Result{Output: r.Output}
	if r.Status != event.StatusCompleted {
		why := r.Detail
		if why == "" {
			why = r.Reason
		}
		res.IsError = true
		res.Output = fmt.Sprintf("the subagent (run %s) did not finish: %s (%s)", r.RunID, r.Status, why)
		if r.Output != "" {
			res.Output += "\nIts last answer:\n" + r.Output
		}
	}
	res.Output, res.Truncated = tools.Truncate(res.Output, 0)
	return res
}

// share is each of n task calls' part of what the run's budget has left:
// the tokens and the cost left, divided equally; 0 where the run has no
// bound, and below 0 where nothing is left.
func (l *loop) share(n int) (tokens int, cost float64) {
	n = max(1, n)
	u := event.Usage{PromptTokens: l.state.Usage.PromptTokens, CompletionTokens: l.state.Usage.CompletionTokens}
	switch left := l.cfg.MaxTokens - u.Total(); {
	case l.cfg.MaxTokens < 0 || l.cfg.MaxTokens > 0 && left <= 0:
		tokens = -1
	case l.cfg.MaxTokens > 0:
		tokens = max(1, left/n)
	}
	if l.cfg.Price != nil {
		switch left := l.cfg.MaxCost - l.cfg.Price.Cost(u); {
		case l.cfg.MaxCost < 0 || l.cfg.MaxCost > 0 && left <= 0:
			cost = -1
		case l.cfg.MaxCost > 0:
			cost = left / float64(n)
		}
	}
	return tokens, cost
}
