package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"agent/event"
)

// The wait tools (docs/PROTOCOL.md#waits): each asks the loop to park the
// run on a wait (Result.Wait) and to answer the call once it is resolved.
const (
	AskHumanName      = "ask_human"
	WaitUntilName     = "wait_until"
	WaitForSignalName = "wait_for_signal"
)

// WaitRequest is what a wait tool asks the loop to wait for.
type WaitRequest struct {
	Kind     string // event.WaitQuestion, WaitSleep or WaitSignal
	Question string
	Options  []string
	Until    time.Time // zero: the loop's default deadline
	Reason   string
	Name     string
}

var askHumanDef = Definition{
	Name: AskHumanName,
	Description: "Ask the person you work for a question and wait for the answer. Use it when you cannot go on " +
		"without a decision or a fact only they have; do not ask what you can find out yourself. The run stops " +
		"until they answer (possibly hours later) and continues with the answer as this tool's result.",
	Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "question": {"type": "string", "description": "The question, self-contained: they may read it on a phone, hours later."},
    "options": {"type": "array", "items": {"type": "string"}, "description": "Suggested answers, if the choice is among a few."}
  },
  "required": ["question"],
  "additionalProperties": false
}`),
}

var waitUntilDef = Definition{
	Name: WaitUntilName,
	Description: "Pause the run until a time, without using any resources, e.g. to check on a deployment later. " +
		"Give either until (RFC 3339) or seconds.",
	Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "until": {"type": "string", "description": "When to go on, RFC 3339, e.g. 2026-11-27T08:00:00Z."},
    "seconds": {"type": "integer", "description": "How long to wait from now."},
    "reason": {"type": "string", "description": "Why, shown to people watching the run."}
  },
  "required": ["reason"],
  "additionalProperties": false
}`),
}

var waitForSignalDef = Definition{
	Name: WaitForSignalName,
	Description: "Pause the run until a named signal arrives from outside (agent signal RUN_ID NAME), e.g. a CI " +
		"job that finished. The result is the signal's data, or says that none arrived before the timeout.",
	Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "name": {"type": "string", "description": "The signal's name, e.g. deploy-done."},
    "timeout_s": {"type": "integer", "description": "How long to wait at most, in seconds."}
  },
  "required": ["name"],
  "additionalProperties": false
}`),
}

// AskHumanTool is ask_human; WaitTools are wait_until and wait_for_signal.
func AskHumanTool() Tool { return waitTool{def: askHumanDef} }
func WaitTools() []Tool  { return []Tool{waitTool{def: waitUntilDef}, waitTool{def: waitForSignalDef}} }

type waitTool struct{ def Definition }

func (t waitTool) Definition() Definition { return t.def }

// ReadOnly: asking again after a crash asks the same wait again.
func (waitTool) ReadOnly() bool { return true }

func (t waitTool) Run(_ context.Context, _ *Workspace, args json.RawMessage) Result {
	var a struct {
		Question string   `json:"question"`
		Options  []string `json:"options"`
		Until    string   `json:"until"`
		Seconds  int      `json:"seconds"`
		Reason   string   `json:"reason"`
		Name     string   `json:"name"`
		TimeoutS int      `json:"timeout_s"`
	}
	if err := decodeArgs(t.def, args, &a); err != nil {
		return errorf("%v", err)
	}
	w := &WaitRequest{}
	switch t.def.Name {
	case AskHumanName:
		if strings.TrimSpace(a.Question) == "" {
			return errorf("ask_human: question is empty; ask something")
		}
		w.Kind, w.Question, w.Options = event.WaitQuestion, a.Question, a.Options
	case WaitUntilName:
		w.Kind, w.Reason = event.WaitSleep, a.Reason
		switch {
		case a.Until != "" && a.Seconds != 0:
			return errorf("wait_until: give until or seconds, not both")
		case a.Until != "":
			at, err := time.Parse(time.RFC3339, a.Until)
			if err != nil {
				return errorf("wait_until: until %q is not an RFC 3339 time like 2026-11-27T08:00:00Z", a.Until)
			}
			w.Until = at
		case a.Seconds > 0:
			w.Until = time.Now().Add(time.Duration(a.Seconds) * time.Second)
		default:
			return errorf("wait_until: give until (RFC 3339) or seconds (more than 0)")
		}
	case WaitForSignalName:
		if strings.TrimSpace(a.Name) == "" {
			return errorf("wait_for_signal: name is empty")
		}
		w.Kind, w.Name = event.WaitSignal, a.Name
		if a.TimeoutS > 0 {
			w.Until = time.Now().Add(time.Duration(a.TimeoutS) * time.Second)
		}
	default:
		return errorf("%s is no wait tool", t.def.Name)
	}
	return Result{Output: fmt.Sprintf("waiting (%s)", w.Kind), Wait: w}
}
