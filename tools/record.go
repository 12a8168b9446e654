package tools

import (
	"context"
	"encoding/json"
	"strings"

	"agent/event"
)

// Harness tools: what a phase learned and what did not work travel to the
// parent as events, which reinjects them into later phases and attempts.

var recordLearningDef = Definition{
	Name: "record_learning",
	Description: "Record a fact worth knowing in later phases of this task: where something lives, a convention, " +
		"a command that works. Keep it to one or two sentences; later phases see it in their instructions.",
	Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "text": {"type": "string", "description": "The learning, one or two sentences."}
  },
  "required": ["text"],
  "additionalProperties": false
}`),
}

var recordFailedApproachDef = Definition{
	Name: "record_failed_approach",
	Description: "Record an approach you tried that did not work, and why, so that later attempts of this phase " +
		"do not repeat it. Use it before switching to a different approach.",
	Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "approach": {"type": "string", "description": "What you tried."},
    "why": {"type": "string", "description": "Why it failed."}
  },
  "required": ["approach", "why"],
  "additionalProperties": false
}`),
}

// RecordTools returns record_learning and record_failed_approach, the
// tools a harness phase adds to the builtins.
func RecordTools() []Tool { return []Tool{recordLearning{}, recordFailedApproach{}} }

type recordLearning struct{}

func (recordLearning) Definition() Definition { return recordLearningDef }

// ReadOnly: re-running after a crash is safe, the event was never emitted.
func (recordLearning) ReadOnly() bool { return true }

func (recordLearning) Run(_ context.Context, _ *Workspace, args json.RawMessage) Result {
	var a struct {
		Text string `json:"text"`
	}
	if err := decodeArgs(recordLearningDef, args, &a); err != nil {
		return errorf("%v", err)
	}
	if strings.TrimSpace(a.Text) == "" {
		return errorf("text is empty")
	}
	return Result{
		Output: "learning recorded",
		Events: []event.Event{event.New(event.LearningRecorded, event.LearningData{Text: strings.TrimSpace(a.Text)})},
	}
}

type recordFailedApproach struct{}

func (recordFailedApproach) Definition() Definition { return recordFailedApproachDef }
func (recordFailedApproach) ReadOnly() bool         { return true }

func (recordFailedApproach) Run(_ context.Context, _ *Workspace, args json.RawMessage) Result {
	var a struct {
		Approach string `json:"approach"`
		Why      string `json:"why"`
	}
	if err := decodeArgs(recordFailedApproachDef, args, &a); err != nil {
		return errorf("%v", err)
	}
	if strings.TrimSpace(a.Approach) == "" || strings.TrimSpace(a.Why) == "" {
		return errorf("approach and why must both be given")
	}
	return Result{
		Output: "failed approach recorded; it will be shown to later attempts",
		Events: []event.Event{event.New(event.ApproachFailed, event.ApproachData{
			Approach: strings.TrimSpace(a.Approach), Why: strings.TrimSpace(a.Why),
		})},
	}
}
