package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"agent/plan"
)

// SubmitPlanName is the planner's tool; a planner run must end with it.
const SubmitPlanName = "submit_plan"

// maxPlanSubmissions is the first submission plus two corrections.
const maxPlanSubmissions = 3

var submitPlanDef = Definition{
	Name: SubmitPlanName,
	Description: "Submit the plan: the objective and the phases that achieve it. Each phase runs in a fresh context " +
		"with only its instructions, its dependencies' outputs and the workspace, so instructions must be self-contained. " +
		"Every phase needs evidence that proves it done: artifact (files that must exist and not be empty), " +
		"programmatic (a shell command that must exit 0), receipt (side-effect receipts such as email_sent), hybrid " +
		"(artifacts and receipts) or none. If the plan is invalid you get the error and may submit again.",
	Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "objective": {"type": "string", "description": "What the whole task achieves, in one or two sentences."},
    "phases": {
      "type": "array",
      "description": "The phases, in a sensible order.",
      "items": {
        "type": "object",
        "properties": {
          "id": {"type": "string", "description": "Unique slug: lowercase letters, digits, - and _."},
          "title": {"type": "string"},
          "instructions": {"type": "string", "description": "Self-contained instructions for this phase."},
          "depends_on": {"type": "array", "items": {"type": "string"}, "description": "Ids of phases that must finish first."},
          "evidence": {
            "type": "object",
            "properties": {
              "type": {"type": "string", "enum": ["artifact", "receipt", "hybrid", "programmatic", "none"]},
              "artifacts": {"type": "array", "items": {"type": "string"}, "description": "Workspace-relative files."},
              "receipts": {"type": "array", "items": {"type": "string"}, "description": "Receipt types, e.g. email_sent."},
              "command": {"type": "string", "description": "Shell command that exits 0 when the phase is done."}
            },
            "required": ["type"]
          },
          "max_attempts": {"type": "integer"},
          "until": {"type": "string"},
          "max_iterations": {"type": "integer"}
        },
        "required": ["id", "instructions", "evidence"]
      }
    }
  },
  "required": ["objective", "phases"]
}`),
}

// SubmitPlan is the planner's tool. A valid plan ends the planner's loop
// with the plan as its final output; an invalid one is returned to the
// model with the error, and the third invalid one ends the loop as failed.
// A SubmitPlan serves one planner run.
type SubmitPlan struct {
	mu       sync.Mutex
	attempts int
	accepted *plan.Plan
	rejected bool // the last submission allowed was invalid too
}

// Plan returns the accepted plan, or nil. The planner child reports it
// whole; the tool's output to the model may be truncated.
func (t *SubmitPlan) Plan() *plan.Plan {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.accepted
}

// Rejected reports whether the planner ended on its last invalid plan:
// the plan is at fault, as an invalid plan file is.
func (t *SubmitPlan) Rejected() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.rejected
}

// NewSubmitPlan returns a submit_plan tool with a fresh correction budget.
func NewSubmitPlan() *SubmitPlan { return &SubmitPlan{} }

func (*SubmitPlan) Definition() Definition { return submitPlanDef }

// ReadOnly: submitting has no effect outside the conversation.
func (*SubmitPlan) ReadOnly() bool { return true }

func (t *SubmitPlan) Run(_ context.Context, _ *Workspace, args json.RawMessage) Result {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.attempts++
	p, err := plan.Parse(args)
	if err != nil {
		if t.attempts >= maxPlanSubmissions {
			t.rejected = true
			return Result{IsError: true, Stop: true, Output: fmt.Sprintf(
				"the planner submitted %d invalid plans; the last: %v", t.attempts, err)}
		}
		return errorf("%v. Fix it and call submit_plan again (%d of %d submissions left).",
			err, maxPlanSubmissions-t.attempts, maxPlanSubmissions)
	}
	t.accepted = p
	ids := make([]string, len(p.Phases))
	for i, ph := range p.Phases {
		ids[i] = ph.ID
	}
	return Result{Output: "plan accepted: " + strings.Join(ids, ", "), Stop: true}
}
