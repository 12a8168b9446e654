package event

// Status words, each defined once: the state of a run (the runs table and
// the terminal event's data.status), a phase, a phase attempt, a tool
// call, a receipt, a notification, a job run, a queued run or attempt, and
// a rewound file.
// Each noun uses the words that apply to it, listed beside each word.
const (
	StatusPending     = "pending"     // phase not started; receipt, notification: intent recorded, outcome not yet
	StatusQueued      = "queued"      // run waiting for a slot or a worker; job run waiting for its turn; notification to be tried
	StatusWaiting     = "waiting"     // run parked on a wait (run.waiting); queued run or attempt no worker holds yet
	StatusClaimed     = "claimed"     // queued run or attempt a worker holds
	StatusStarted     = "started"     // tool call started, no result recorded (a crash interrupted it)
	StatusRunning     = "running"     // run, phase, attempt, job run
	StatusCompleted   = "completed"   // run, phase, tool call, job run
	StatusPassed      = "passed"      // attempt whose evidence was verified
	StatusFailed      = "failed"      // run, phase, attempt, tool call, job run, rewound file; notification given up
	StatusCrashed     = "crashed"     // attempt whose child died without a result
	StatusTimeout     = "timeout"     // attempt stopped at its timeout
	StatusCancelled   = "cancelled"   // run, attempt, job run
	StatusInterrupted = "interrupted" // run, attempt: resumable
	StatusLost        = "lost"        // attempt whose worker went away: not counted
	StatusSkipped     = "skipped"     // job run its overlap policy skipped; rewound file changed since; notification of a wait answered first
	StatusDone        = "done"        // receipt, notification: the effect happened; queued attempt: its result is in
	StatusUnknown     = "unknown"     // receipt, notification: the effect's outcome was lost
	StatusRestored    = "restored"    // rewound file: its content from before the run is back
	StatusRemoved     = "removed"     // rewound file: the run created it, and it is gone again
	// StatusPlanned is a harness run stopped after planning (--plan); its
	// terminal event is run.interrupted and it is resumable.
	StatusPlanned = "planned"
)

// Reasons a run ends with (docs/PROTOCOL.md#how-a-run-ends): the terminal event's
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
	ReasonInvalidPlan   = "invalid_plan" // a plan given by the user, or every one the planner made, is invalid: exit 2
	ReasonPlanning      = "planning"     // the planner did not produce a plan
	ReasonPlanned       = "planned"
	ReasonLeaseLost     = "lease_lost"
	ReasonCrashed       = "crashed"
	ReasonEnvironment   = "environment" // the store or disk could not be used: exit 5, resumable
	ReasonError         = "error"
	// ReasonInvalidOptions: an option the run could only check once it
	// began is bad input, e.g. --allow-tools naming a tool its MCP
	// server does not offer. Exit 2.
	ReasonInvalidOptions = "invalid_options"
	// ReasonBudgetExhausted: the run passed --max-tokens or --max-cost;
	// no request was made after (docs/PROTOCOL.md#how-a-run-ends). Exit 1, resumable with
	// a new budget.
	ReasonBudgetExhausted = "budget_exhausted"
	// ReasonRateLimited: the provider asked to wait longer than the
	// retries allow; the run is interrupted until resume_after.
	ReasonRateLimited = "rate_limited"
	// ReasonWaiting: the drive parked the run on a wait (run.waiting); a
	// person or a time resolves it, then the run goes on. Exit 6.
	ReasonWaiting = "waiting"
	// ReasonSchema: the final answer did not satisfy the run's output
	// schema (--output-schema), even after the model was asked to fix it
	// twice; data.detail names the validation error. Exit 1.
	ReasonSchema = "schema"
	// ReasonHook: a hook stopped the run (continue: false) or refused its
	// prompt (UserPromptSubmit, exit 2) (docs/PROTOCOL.md#hooks). Exit 1.
	ReasonHook = "hook"
	// ReasonContextBudget ends a Ralph iteration, never a run.
	ReasonContextBudget = "context_budget"
)

// PlannerPhaseID marks the planner child's events in a harness run. It
// cannot collide with a plan's phase ids, which are slugs starting with a
// letter or digit.
const PlannerPhaseID = "_plan"

// Kinds of wait (run.waiting's data.kind).
const (
	WaitApproval = "approval" // a tool call waits for allow or deny
	WaitQuestion = "question" // the model asked a person (ask_human)
	WaitSleep    = "sleep"    // until a time (wait_until, a rate limit)
	WaitSignal   = "signal"   // until a named signal arrives (wait_for_signal)
)

// What a wait's deadline does (run.waiting's data.on_timeout).
const (
	OnTimeoutDeny     = "deny"     // the call is denied: approvals' default
	OnTimeoutAllow    = "allow"    // the call runs
	OnTimeoutContinue = "continue" // the tool's result says nobody answered
	OnTimeoutFail     = "fail"     // the run fails
)

// How a wait was resolved (wait.resolved's data.outcome).
const (
	WaitAllowed   = "allowed"
	WaitDenied    = "denied"
	WaitAnswered  = "answered"
	WaitElapsed   = "elapsed"   // a sleep reached its time
	WaitSignalled = "signalled" // a signal arrived
	WaitTimedOut  = "timed_out" // the deadline passed first; on_timeout applies
)

// Who resolved a wait (wait.resolved's data.via).
const (
	ViaTerminal = "terminal" // asked inline by the process that drives the run
	ViaCLI      = "cli"      // agent approve, deny, answer or signal
	ViaEditor   = "editor"   // asked through an editor's session/request_permission (agent acp)
	ViaGateway  = "gateway"  // wait.answer, the HTTP routes
	ViaWeb      = "web"      // the web view's inbox
	ViaLink     = "link"     // a one-decision link
	ViaHook     = "hook"
	ViaTimeout  = "timeout" // nobody: the deadline passed
)
