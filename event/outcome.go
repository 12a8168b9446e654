package event

// Statuses of a run: the runs table and the terminal event's data.status.
const (
	StatusRunning     = "running"
	StatusCompleted   = "completed"
	StatusFailed      = "failed"
	StatusCancelled   = "cancelled"
	StatusInterrupted = "interrupted"
	// StatusPlanned is a harness run stopped after planning (--plan); its
	// terminal event is run.interrupted and it is resumable.
	StatusPlanned = "planned"
)

// Reasons a run ends with (DESIGN.md §3): the terminal event's
// data.reason, one word scripts can switch on. The sentence for people is
// data.detail.
const (
	ReasonCompleted     = "completed"
	ReasonMaxTurns      = "max_turns"
	ReasonMaxIterations = "max_iterations"
	ReasonToolLoop      = "repeated_tool_call"
	ReasonTimeout       = "timeout"
	ReasonInterrupted   = "interrupted"
	ReasonCancelled     = "cancelled"
	ReasonProvider      = "provider"
	ReasonVerification  = "verification"
	ReasonInvalidPlan   = "invalid_plan" // a plan given by the user is invalid: exit 2
	ReasonPlanning      = "planning"     // the planner did not produce a plan
	ReasonPlanned       = "planned"
	ReasonLeaseLost     = "lease_lost"
	ReasonCrashed       = "crashed"
	ReasonEnvironment   = "environment" // the store or disk could not be used: exit 5, resumable
	ReasonError         = "error"
	// ReasonBudgetExhausted: the run passed --max-tokens or --max-cost;
	// no request was made after (DESIGN.md §12). Exit 1, resumable with
	// a new budget.
	ReasonBudgetExhausted = "budget_exhausted"
	// ReasonRateLimited: the provider asked to wait longer than the
	// retries allow; the run is interrupted until resume_after.
	ReasonRateLimited = "rate_limited"
	// ReasonContextBudget ends a Ralph iteration, never a run.
	ReasonContextBudget = "context_budget"
)

// PlannerPhaseID marks the planner child's events in a harness run. It
// cannot collide with a plan's phase ids, which are slugs starting with a
// letter or digit.
const PlannerPhaseID = "_plan"
