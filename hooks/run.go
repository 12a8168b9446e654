package hooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Input is the JSON a hook reads on its stdin: Claude Code's fields, the
// ones of its event set, and run_id.
type Input struct {
	SessionID      string `json:"session_id"`
	TranscriptPath string `json:"transcript_path"`
	CWD            string `json:"cwd"`
	PermissionMode string `json:"permission_mode"`
	HookEventName  string `json:"hook_event_name"`
	RunID          string `json:"run_id"`

	// PreToolUse, PostToolUse: the tool by Claude's name when it has one
	// (ClaudeName), its arguments by Claude's field names (ClaudeInput).
	ToolName     string          `json:"tool_name,omitempty"`
	ToolInput    json.RawMessage `json:"tool_input,omitempty"`
	ToolUseID    string          `json:"tool_use_id,omitempty"`
	ToolResponse json.RawMessage `json:"tool_response,omitempty"`

	Prompt         string `json:"prompt,omitempty"`           // UserPromptSubmit
	StopHookActive *bool  `json:"stop_hook_active,omitempty"` // Stop, SubagentStop: a Stop hook already made the loop go on
	Source         string `json:"source,omitempty"`           // SessionStart: startup
	Trigger        string `json:"trigger,omitempty"`          // PreCompact: auto
	// Notification: what the person is told, and why (permission_prompt
	// for an approval, elicitation_dialog for a question).
	Message          string `json:"message,omitempty"`
	NotificationType string `json:"notification_type,omitempty"`
}

// Env is where hooks run: the workspace (their working directory and
// CLAUDE_PROJECT_DIR) and the environment they start from (nil: this
// process's). Hooks are the operator's code: they run outside the
// sandbox, as MCP servers from config.toml do.
type Env struct {
	Dir     string
	Environ []string
}

// Result is how one hook ran.
type Result struct {
	Hook     Hook
	ExitCode int // -1 when it did not start, or was killed
	Stdout   string
	Stderr   string
	Duration time.Duration
	TimedOut bool
	Err      error // it did not start, or was killed at its timeout or with the run
}

// maxOutput bounds what is kept of a hook's stdout and of its stderr.
const maxOutput = 64 << 10

// killGrace is how long a hook's pipes may stay open after its process
// group was killed (a process that left the group keeps them).
const killGrace = time.Second

// Run runs hooks at once, each with in on its stdin, and returns their
// results in the hooks' order. A hook that outlives its timeout, or ctx,
// is killed with its process group.
func Run(ctx context.Context, hooks []Hook, in Input, env Env) []Result {
	stdin, err := json.Marshal(in)
	if err != nil {
		panic("hooks: marshal input: " + err.Error()) // plain fields: cannot fail
	}
	environ := env.Environ
	if environ == nil {
		environ = os.Environ()
	}
	environ = append(environ[:len(environ):len(environ)], "CLAUDE_PROJECT_DIR="+env.Dir)
	out := make([]Result, len(hooks))
	if len(hooks) == 1 {
		out[0] = run(ctx, hooks[0], stdin, env.Dir, environ)
		return out
	}
	var wg sync.WaitGroup
	for i, h := range hooks {
		wg.Go(func() { out[i] = run(ctx, h, stdin, env.Dir, environ) })
	}
	wg.Wait()
	return out
}

func run(ctx context.Context, h Hook, stdin []byte, dir string, environ []string) Result {
	began := time.Now()
	tctx, cancel := context.WithTimeout(ctx, h.Timeout)
	defer cancel()
	cmd := exec.CommandContext(tctx, "sh", "-c", h.Command)
	cmd.Dir, cmd.Env = dir, environ
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr capped
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Its own process group, so that what it started dies with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); errors.Is(err, syscall.ESRCH) {
			return os.ErrProcessDone
		}
		return nil
	}
	cmd.WaitDelay = killGrace
	err := cmd.Run()
	r := Result{Hook: h, ExitCode: -1, Stdout: stdout.String(), Stderr: stderr.String(), Duration: time.Since(began)}
	var exit *exec.ExitError
	switch {
	case tctx.Err() != nil && ctx.Err() == nil:
		r.TimedOut = true
		r.Err = fmt.Errorf("timed out after %s; its process group was killed", h.Timeout)
	case ctx.Err() != nil:
		r.Err = context.Cause(ctx)
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		r.ExitCode = exit.ExitCode()
	case errors.As(err, &exit):
		r.Err = fmt.Errorf("killed by %s", exit.ProcessState)
	case err != nil:
		r.Err = err
	default:
		r.ExitCode = 0
	}
	return r
}

// capped keeps the first maxOutput bytes written to it.
type capped struct{ bytes.Buffer }

func (c *capped) Write(p []byte) (int, error) {
	if room := maxOutput - c.Len(); room > 0 {
		c.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// Output is what a hook may answer on stdout, as JSON, when it exits 0
// (Claude Code's fields).
type Output struct {
	Continue      *bool  `json:"continue"`
	StopReason    string `json:"stopReason"`
	SystemMessage string `json:"systemMessage"`
	Decision      string `json:"decision"` // approve or block; PreToolUse's older form of permissionDecision
	Reason        string `json:"reason"`
	HookSpecific  struct {
		PermissionDecision       string          `json:"permissionDecision"`
		PermissionDecisionReason string          `json:"permissionDecisionReason"`
		UpdatedInput             json.RawMessage `json:"updatedInput"`
		AdditionalContext        string          `json:"additionalContext"`
	} `json:"hookSpecificOutput"`
}

// Decisions a hook's run may come to.
const (
	Allow = "allow" // PreToolUse: run the call without asking
	Deny  = "deny"  // PreToolUse: do not run the call; the reason goes to the model
	Ask   = "ask"   // PreToolUse: ask a person first
	Block = "block" // Stop: go on with the reason; UserPromptSubmit: refuse the prompt; PostToolUse: tell the model
	Halt  = "stop"  // continue: false, any event: the run stops
)

// Verdict is what one hook's run means.
type Verdict struct {
	Decision     string          // one of the decisions above, or "" for none
	Reason       string          // for the model (deny, block) or the person (ask, stop)
	Context      string          // additional context for the model
	UpdatedInput json.RawMessage // PreToolUse: the call's new arguments, by Claude's field names
	// Warning is said to the person and decides nothing: a hook that
	// failed, timed out or exited other than 0 or 2, or its systemMessage.
	Warning string
}

// Verdict reads a hook's run as Claude Code does: exit 2 blocks with its
// stderr, exit 0 may decide with JSON on stdout (or, for SessionStart
// and UserPromptSubmit, add its plain stdout as context), anything else
// is a warning.
func (r Result) Verdict() Verdict {
	ev := r.Hook.Event
	switch {
	case r.Err != nil:
		return Verdict{Warning: fmt.Sprintf("%s hook %q %v; the run goes on", ev, clip(r.Hook.Command, 80), r.Err)}
	case r.ExitCode == 2:
		reason := strings.TrimSpace(r.Stderr)
		if reason == "" {
			reason = fmt.Sprintf("a %s hook blocked it (exit 2)", ev)
		}
		switch ev {
		case PreToolUse:
			return Verdict{Decision: Deny, Reason: reason}
		case Stop, SubagentStop, UserPromptSubmit, PostToolUse:
			return Verdict{Decision: Block, Reason: reason}
		}
		return Verdict{Warning: fmt.Sprintf("%s hook %q exited 2 (%s); it cannot block this event", ev, clip(r.Hook.Command, 80), clip(firstLine(reason), 200))}
	case r.ExitCode != 0:
		msg := fmt.Sprintf("%s hook %q exited %d", ev, clip(r.Hook.Command, 80), r.ExitCode)
		if line := firstLine(r.Stderr); line != "" {
			msg += ": " + clip(line, 200)
		}
		return Verdict{Warning: msg + "; the run goes on"}
	}
	stdout := strings.TrimSpace(r.Stdout)
	var o Output
	if !strings.HasPrefix(stdout, "{") || json.Unmarshal([]byte(stdout), &o) != nil {
		if ev == SessionStart || ev == UserPromptSubmit {
			return Verdict{Context: stdout}
		}
		return Verdict{}
	}
	v := Verdict{Context: o.HookSpecific.AdditionalContext}
	if o.SystemMessage != "" {
		v.Warning = fmt.Sprintf("%s hook: %s", ev, o.SystemMessage)
	}
	if o.Continue != nil && !*o.Continue {
		v.Decision, v.Reason = Halt, o.StopReason
		if v.Reason == "" {
			v.Reason = "continue: false"
		}
		return v
	}
	switch ev {
	case PreToolUse:
		v.Decision, v.Reason = o.HookSpecific.PermissionDecision, o.HookSpecific.PermissionDecisionReason
		switch {
		case v.Decision == "" && o.Decision == "approve":
			v.Decision = Allow
		case v.Decision == "" && o.Decision == "block":
			v.Decision = Deny
		}
		if v.Reason == "" {
			v.Reason = o.Reason
		}
		if v.Decision != Allow && v.Decision != Deny && v.Decision != Ask {
			v.Decision = ""
		}
		if len(o.HookSpecific.UpdatedInput) > 0 && string(o.HookSpecific.UpdatedInput) != "null" {
			v.UpdatedInput = o.HookSpecific.UpdatedInput
		}
	case Stop, SubagentStop, UserPromptSubmit, PostToolUse:
		if o.Decision == Block {
			v.Decision, v.Reason = Block, o.Reason
			if v.Reason == "" {
				v.Reason = fmt.Sprintf("a %s hook blocked it", ev)
			}
		}
	}
	return v
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
