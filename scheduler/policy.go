package scheduler

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"agent/approval"
	"agent/sandbox"
	"agent/schema"
)

// Overlap policies: what a tick does while an earlier tick of the same job
// is still running (or retrying).
const (
	OverlapSkipIfRunning = "skip_if_running" // record the tick as skipped (default)
	OverlapQueueOne      = "queue_one"       // keep one tick waiting behind it; skip further ones
	OverlapParallel      = "parallel"        // run side by side, within MaxConcurrentRuns
)

// Missed-run policies: what happens to ticks that fell due while the
// gateway was down (or the clock jumped past them).
const (
	MissedSkip              = "skip"                 // run none of them (default)
	MissedRunOnceOnRecovery = "run_once_on_recovery" // run the latest of them, once
)

// Policy defaults.
const (
	DefaultTimeout     = 10 * time.Minute
	DefaultMaxAttempts = 1
	DefaultRetryBase   = 30 * time.Second
	DefaultRetryCap    = 10 * time.Minute
)

// Policy is a job's policy, kept as scheduled_jobs.policy_json.
type Policy struct {
	Overlap string
	// Missed is MissedSkip, MissedRunOnceOnRecovery, or "" for the
	// gateway's SchedulerRecoveryPolicy (Config.RecoveryPolicy).
	Missed  string
	Retry   Retry
	Timeout time.Duration // per attempt; mandatory, so a hung run cannot block its job forever
	// Tools is the run's tool allowlist; empty means the default tools.
	Tools []string
	// Sandbox and Network are the run's (README.md#the-sandbox); "" is the
	// default mode.
	Sandbox string
	Network bool
	// MaxTokens and MaxCost (USD) bound each run's spend (README.md#context-and-spend);
	// 0: no bound.
	MaxTokens int
	MaxCost   float64
	// Ask are the approval rules of each run (--ask; docs/PROTOCOL.md#waits):
	// a call they name waits for a person, and the run with it.
	Ask []string
	// OutputSchema is the JSON Schema each run's final answer must
	// satisfy (README.md#structured-output); nil: none.
	OutputSchema json.RawMessage
}

// Retry is how failed attempts of a tick are retried: MaxAttempts in all
// (1: no retry), after delays growing from Base to Cap.
type Retry struct {
	MaxAttempts int
	Base        time.Duration
	Cap         time.Duration
}

// DefaultPolicy returns the policy of a job that sets none.
func DefaultPolicy() Policy {
	return Policy{
		Overlap: OverlapSkipIfRunning,
		Retry:   Retry{MaxAttempts: DefaultMaxAttempts, Base: DefaultRetryBase, Cap: DefaultRetryCap},
		Timeout: DefaultTimeout,
	}
}

// ParsePolicy decodes policy JSON; fields it leaves out take the defaults.
func ParsePolicy(data []byte) (Policy, error) {
	p := DefaultPolicy()
	if len(data) > 0 {
		if err := json.Unmarshal(data, &p); err != nil {
			return Policy{}, fmt.Errorf("invalid policy: %w", err)
		}
	}
	if err := p.Validate(); err != nil {
		return Policy{}, err
	}
	return p, nil
}

// Validate checks every field and names the first that is wrong.
func (p Policy) Validate() error {
	switch p.Overlap {
	case OverlapSkipIfRunning, OverlapQueueOne, OverlapParallel:
	default:
		return fmt.Errorf("invalid policy: overlap %q: want %s, %s or %s", p.Overlap, OverlapSkipIfRunning, OverlapQueueOne, OverlapParallel)
	}
	switch p.Missed {
	case "", MissedSkip, MissedRunOnceOnRecovery:
	default:
		return fmt.Errorf("invalid policy: missed %q: want %s or %s", p.Missed, MissedSkip, MissedRunOnceOnRecovery)
	}
	if p.Timeout <= 0 {
		return fmt.Errorf("invalid policy: timeout must be positive, got %s", p.Timeout)
	}
	if err := p.Retry.validate(); err != nil {
		return fmt.Errorf("invalid policy: %w", err)
	}
	if p.MaxTokens < 0 || p.MaxCost < 0 {
		return errors.New("invalid policy: max_tokens and max_cost must be positive")
	}
	if _, err := sandbox.ParseMode(p.Sandbox); err != nil {
		return fmt.Errorf("invalid policy: sandbox: %w", err)
	}
	if _, err := approval.Parse(p.Ask); err != nil {
		return fmt.Errorf("invalid policy: ask: %w", err)
	}
	if p.OutputSchema != nil {
		if _, err := schema.Parse(p.OutputSchema); err != nil {
			return fmt.Errorf("invalid policy: output_schema: %w", err)
		}
	}
	seen := make(map[string]bool, len(p.Tools))
	for _, t := range p.Tools {
		if t == "" {
			return errors.New("invalid policy: tools: empty tool name")
		}
		if seen[t] {
			return fmt.Errorf("invalid policy: tools: %s listed twice", t)
		}
		seen[t] = true
	}
	return nil
}

func (r Retry) validate() error {
	switch {
	case r.MaxAttempts < 1:
		return fmt.Errorf("retry max_attempts must be at least 1, got %d", r.MaxAttempts)
	case r.Base <= 0:
		return fmt.Errorf("retry base must be positive, got %s", r.Base)
	case r.Cap < r.Base:
		return fmt.Errorf("retry cap %s is below base %s", r.Cap, r.Base)
	}
	return nil
}

// Delay returns how long to wait before the attempt after failed attempt
// n (1-based): Base·2^(n-1) capped at Cap, with "equal jitter": the upper
// half is random (rnd in [0, 1)), so retries of many jobs spread out but
// never come sooner than half the nominal delay.
func (r Retry) Delay(n int, rnd float64) time.Duration {
	d := float64(r.Cap)
	if n < 63 {
		d = math.Min(float64(r.Base)*math.Exp2(float64(n-1)), float64(r.Cap))
	}
	rnd = math.Min(math.Max(rnd, 0), 1)
	return time.Duration(d/2 + rnd*d/2)
}

// policyJSON is Policy on the wire: durations as Go duration strings.
type policyJSON struct {
	Overlap   string    `json:"overlap"`
	Missed    string    `json:"missed,omitempty"`
	Retry     retryJSON `json:"retry"`
	Timeout   duration  `json:"timeout"`
	Tools     []string  `json:"tools,omitempty"`
	Sandbox   string    `json:"sandbox,omitempty"`
	Network   bool      `json:"network,omitempty"`
	MaxTokens int       `json:"max_tokens,omitempty"`
	MaxCost   float64   `json:"max_cost,omitempty"`
	Ask       []string  `json:"ask,omitempty"`
	// OutputSchema: null (on update) takes the schema away.
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`
}

type retryJSON struct {
	MaxAttempts int      `json:"max_attempts"`
	Base        duration `json:"base"`
	Cap         duration `json:"cap"`
}

// MarshalJSON writes durations as strings such as "10m0s".
func (p Policy) MarshalJSON() ([]byte, error) {
	return json.Marshal(policyJSON{
		Overlap: p.Overlap, Missed: p.Missed, Timeout: duration(p.Timeout), Tools: p.Tools, Sandbox: p.Sandbox, Network: p.Network,
		MaxTokens: p.MaxTokens, MaxCost: p.MaxCost, Ask: p.Ask, OutputSchema: p.OutputSchema,
		Retry: retryJSON{MaxAttempts: p.Retry.MaxAttempts, Base: duration(p.Retry.Base), Cap: duration(p.Retry.Cap)},
	})
}

// UnmarshalJSON reads durations as strings ("90s", "10m") or as numbers
// of seconds. Fields the JSON leaves out keep their current values, or
// take the defaults when decoding into a zero Policy (as into a new
// *Policy field), so {"overlap":"parallel"} is a complete policy.
func (p *Policy) UnmarshalJSON(data []byte) error {
	if p.Overlap == "" && p.Missed == "" && p.Timeout == 0 && p.Retry == (Retry{}) && p.Tools == nil && p.Sandbox == "" && !p.Network && p.MaxTokens == 0 && p.MaxCost == 0 && p.Ask == nil && p.OutputSchema == nil {
		*p = DefaultPolicy()
	}
	w := policyJSON{
		Overlap: p.Overlap, Missed: p.Missed, Timeout: duration(p.Timeout), Tools: slices.Clone(p.Tools),
		Sandbox: p.Sandbox, Network: p.Network, MaxTokens: p.MaxTokens, MaxCost: p.MaxCost, Ask: slices.Clone(p.Ask),
		OutputSchema: p.OutputSchema,
		Retry:        retryJSON{MaxAttempts: p.Retry.MaxAttempts, Base: duration(p.Retry.Base), Cap: duration(p.Retry.Cap)},
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	if string(w.OutputSchema) == "null" {
		w.OutputSchema = nil
	}
	*p = Policy{
		OutputSchema: w.OutputSchema,
		Overlap:      w.Overlap, Missed: w.Missed, Timeout: time.Duration(w.Timeout), Tools: w.Tools,
		Sandbox: w.Sandbox, Network: w.Network, MaxTokens: w.MaxTokens, MaxCost: w.MaxCost, Ask: w.Ask,
		Retry: Retry{MaxAttempts: w.Retry.MaxAttempts, Base: time.Duration(w.Retry.Base), Cap: time.Duration(w.Retry.Cap)},
	}
	return nil
}

type duration time.Duration

func (d duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

func (d *duration) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		var secs float64
		if err := json.Unmarshal(data, &secs); err != nil {
			return fmt.Errorf("duration %s: want a string such as \"90s\" or a number of seconds", data)
		}
		*d = duration(secs * float64(time.Second))
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		if secs, err2 := strconv.ParseFloat(s, 64); err2 == nil {
			v = time.Duration(secs * float64(time.Second))
		} else {
			return fmt.Errorf("duration %q: want such as \"90s\" or \"10m\"", s)
		}
	}
	*d = duration(v)
	return nil
}
