package tools

import (
	"context"
	"encoding/json"
	"strings"
)

// TaskName is the task tool (docs/PROTOCOL.md#subagents): each call is
// answered by a sub-run, a run of its own with a fresh conversation, which
// the loop asks its Delegator for; several calls of one reply run at once.
const TaskName = "task"

// TaskRequest is what a task call asks of its sub-run.
type TaskRequest struct {
	Description string // a few words, for people watching
	Prompt      string // the sub-run's whole task: it sees nothing else
}

var taskDef = Definition{
	Name: TaskName,
	Description: "Delegate a self-contained task to a subagent: a fresh agent with the same workspace and tools " +
		"(but no task tool), which sees only your prompt and returns its final answer as this tool's result. " +
		"Use it for independent pieces of work (research, a separate change, a review) that would clutter your " +
		"own context; several task calls in one reply run at the same time.",
	Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "description": {"type": "string", "description": "What the task is, in 3 to 6 words, e.g. \"survey the test suite\"."},
    "prompt": {"type": "string", "description": "The task in full: what to do, what to look at, and what to answer with. The subagent knows nothing else of this conversation."}
  },
  "required": ["description", "prompt"],
  "additionalProperties": false
}`),
}

// TaskTool is the task tool.
func TaskTool() Tool { return taskTool{} }

type taskTool struct{}

func (taskTool) Definition() Definition { return taskDef }

// ReadOnly: no. A task call that started before a crash is not run again
// from the start: the loop resumes its sub-run.
func (taskTool) ReadOnly() bool { return false }

// Run checks the call and hands it to the loop (Result.Task).
func (taskTool) Run(_ context.Context, _ *Workspace, args json.RawMessage) Result {
	var a struct {
		Description string `json:"description"`
		Prompt      string `json:"prompt"`
	}
	if err := decodeArgs(taskDef, args, &a); err != nil {
		return errorf("%v", err)
	}
	if strings.TrimSpace(a.Prompt) == "" {
		return errorf("task: prompt is empty; say what the subagent should do")
	}
	desc := strings.Join(strings.Fields(a.Description), " ")
	if desc == "" {
		desc = "task"
	}
	return Result{Output: "delegated", Task: &TaskRequest{Description: desc, Prompt: a.Prompt}}
}
