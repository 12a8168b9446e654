package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"agent/event"
	"agent/hooks"
	"agent/llm"
	"agent/tools"
)

// Hooks (docs/PROTOCOL.md#hooks): the loop runs the operator's hooks at
// its points, in Claude Code's protocol, and acts on what they decide.
// Each run of a hook is recorded (hook.completed, with its decision)
// before the loop acts on it, under a key unique in the run: a resumed
// loop acts on the records of a key and runs only the hooks that have
// none, so a decided call is not asked again and a hook that ran does
// not run twice.

// decided is what the hooks of one event decided together.
type decided struct {
	decision string // the strongest: stop, deny, block, ask, allow, or ""
	reasons  []string
	contexts []string
	updated  json.RawMessage // PreToolUse: the call's new arguments, agent's names
}

// strength orders decisions: the strongest of several hooks' wins, as
// Claude Code's deny beats ask beats allow.
var strength = map[string]int{hooks.Allow: 1, hooks.Ask: 2, hooks.Block: 3, hooks.Deny: 3, hooks.Halt: 4}

func (d decided) reason() string { return strings.Join(d.reasons, "\n") }

// halted says that a hook of ev stopped the run (continue: false), and
// its stopReason.
func halted(ev string, d decided) string {
	return fmt.Sprintf("a %s hook stopped the run: %s", ev, d.reason())
}
func (d decided) context() string { return strings.Join(d.contexts, "\n\n") }

// add counts one hook's record.
func (d *decided) add(r event.HookCompletedData) {
	if strength[r.Decision] > strength[d.decision] {
		d.decision = r.Decision
	}
	if r.Reason != "" && r.Decision != "" {
		d.reasons = append(d.reasons, r.Reason)
	}
	if r.Context != "" {
		d.contexts = append(d.contexts, r.Context)
	}
	if len(r.UpdatedInput) > 0 {
		d.updated = r.UpdatedInput
	}
}

// hookRecords indexes a resumed run's hook records by event and key.
func hookRecords(recs []event.HookCompletedData) map[string][]event.HookCompletedData {
	out := map[string][]event.HookCompletedData{}
	for _, r := range recs {
		out[r.Event+"\x00"+r.Key] = append(out[r.Event+"\x00"+r.Key], r)
	}
	return out
}

// fire runs the hooks of ev that match names for key, those the journal
// does not record yet, and returns what all of them decided. call is the
// tool call they are about, if any. A hook stopped by ctx is not
// recorded: the loop stops too, and a resume runs it again.
func (l *loop) fire(ctx context.Context, ev, key string, names []string, in hooks.Input, call *llm.ToolCall) (decided, error) {
	var d decided
	hs := l.cfg.Hooks.For(ev, names...)
	if len(hs) == 0 {
		return d, nil
	}
	var run []hooks.Hook
	for _, h := range hs {
		if r, ok := l.recorded(ev, key, h.Command); ok {
			d.add(r)
		} else {
			run = append(run, h)
		}
	}
	if len(run) == 0 {
		return d, nil
	}
	sid := l.cfg.SessionID
	if sid == "" {
		sid = l.cfg.RunID
	}
	in.SessionID, in.CWD, in.PermissionMode, in.HookEventName, in.RunID = sid, l.cfg.HookEnv.Dir, "default", ev, l.cfg.RunID
	results := hooks.Run(ctx, run, in, l.cfg.HookEnv)
	if ctx.Err() != nil {
		return d, ctx.Err()
	}
	for _, res := range results {
		v := res.Verdict()
		r := event.HookCompletedData{
			Event: ev, Command: res.Hook.Command, ExitCode: res.ExitCode, Decision: v.Decision,
			DurationMS: res.Duration.Milliseconds(), Key: key, Reason: v.Reason, Context: v.Context, TimedOut: res.TimedOut,
		}
		if call != nil {
			r.CallID, r.Tool = call.ID, call.Name
			if v.UpdatedInput != nil {
				r.UpdatedInput = hooks.AgentInput(call.Name, v.UpdatedInput, l.cfg.HookEnv.Dir)
			}
		}
		if err := l.emit(ctx, event.New(event.HookCompleted, r)); err != nil {
			return d, err
		}
		if v.Warning != "" {
			if err := l.emit(ctx, event.New(event.Warning, event.WarningData{Message: v.Warning})); err != nil {
				return d, err
			}
		}
		l.hooked[ev+"\x00"+key] = append(l.hooked[ev+"\x00"+key], r)
		d.add(r)
	}
	return d, nil
}

// recorded is the journal's record of command's run for ev and key.
func (l *loop) recorded(ev, key, command string) (event.HookCompletedData, bool) {
	for _, r := range l.hooked[ev+"\x00"+key] {
		if r.Command == command {
			return r, true
		}
	}
	return event.HookCompletedData{}, false
}

// callKey is the key of a tool call's hooks: the call at the turn that
// made it, as its wait's id is, since call ids may repeat across turns.
func (l *loop) callKey(callID string) string { return fmt.Sprintf("call/%d/%s", l.state.Turns, callID) }

// promptHooks fires SessionStart (a session's first run only) and then
// UserPromptSubmit (a person's prompt only) before the run's prompt is
// first sent; a sub-run fires neither. It returns what their output adds
// to the prompt, or why the run stops: a UserPromptSubmit hook refused
// the prompt, or a hook said continue: false.
func (l *loop) promptHooks(ctx context.Context) (extra, stop string, err error) {
	if l.cfg.ParentRunID != "" {
		return "", "", nil
	}
	var start decided
	if len(l.state.Prior) == 0 { // a session's later runs: it started already
		if start, err = l.fire(ctx, hooks.SessionStart, "start", []string{"startup"}, hooks.Input{Source: "startup"}, nil); err != nil {
			return "", "", err
		}
		if start.decision == hooks.Halt {
			return "", halted(hooks.SessionStart, start), nil
		}
	}
	if l.cfg.AgentPrompt {
		return start.context(), "", nil
	}
	submit, err := l.fire(ctx, hooks.UserPromptSubmit, "start", nil, hooks.Input{Prompt: l.prompt}, nil)
	if err != nil {
		return "", "", err
	}
	switch submit.decision {
	case hooks.Halt:
		return "", halted(hooks.UserPromptSubmit, submit), nil
	case hooks.Block:
		return "", "a UserPromptSubmit hook refused the prompt: " + submit.reason(), nil
	}
	return joinNonEmpty(start.context(), submit.context()), "", nil
}

// preToolUse fires the PreToolUse hooks of a call before it is approved
// and started. It returns the call as it is to run (a hook's
// updatedInput replaces its arguments) and what the hooks decided.
func (l *loop) preToolUse(ctx context.Context, call llm.ToolCall) (llm.ToolCall, decided, error) {
	if !l.cfg.Hooks.Has(hooks.PreToolUse) {
		return call, decided{}, nil
	}
	d, err := l.fire(ctx, hooks.PreToolUse, l.callKey(call.ID), hooks.Names(call.Name), hooks.Input{
		ToolName: hooks.ClaudeName(call.Name), ToolUseID: call.ID,
		ToolInput: hooks.ClaudeInput(call.Name, argsJSON(call.Arguments), l.cfg.HookEnv.Dir),
	}, &call)
	if err == nil && len(d.updated) > 0 && d.decision != hooks.Deny && d.decision != hooks.Halt {
		call.Arguments = string(d.updated)
	}
	return call, d, err
}

// hookRefusal is the result of a call a PreToolUse hook denied, or that a
// hook's continue: false left unrun.
func hookRefusal(call llm.ToolCall, d decided) tools.Result {
	if d.decision == hooks.Halt {
		return tools.Result{IsError: true, Output: "not run: " + halted(hooks.PreToolUse, d)}
	}
	return tools.Result{IsError: true, Output: fmt.Sprintf("denied (PreToolUse hook): %s; the %s call did not run", d.reason(), call.Name)}
}

// postToolUse fires the PostToolUse hooks of a call whose result is
// recorded. It returns what they tell the model (a block's reason, their
// additional context), as one text, or why a hook stopped the run.
func (l *loop) postToolUse(ctx context.Context, call llm.ToolCall, res tools.Result) (said, stop string, err error) {
	if !l.cfg.Hooks.Has(hooks.PostToolUse) {
		return "", "", nil
	}
	args := argsJSON(call.Arguments)
	d, err := l.fire(ctx, hooks.PostToolUse, l.callKey(call.ID), hooks.Names(call.Name), hooks.Input{
		ToolName: hooks.ClaudeName(call.Name), ToolUseID: call.ID,
		ToolInput:    hooks.ClaudeInput(call.Name, args, l.cfg.HookEnv.Dir),
		ToolResponse: hooks.ClaudeResponse(call.Name, args, l.cfg.HookEnv.Dir, !res.IsError, res.Output),
	}, &call)
	if err != nil || d.decision == hooks.Halt {
		return "", halted(hooks.PostToolUse, d), err
	}
	return postFeedback(call, d), "", nil
}

// postFeedback is what PostToolUse hooks tell the model about a call.
func postFeedback(call llm.ToolCall, d decided) string {
	text := joinNonEmpty(d.reason(), d.context())
	if text == "" {
		return ""
	}
	return fmt.Sprintf("PostToolUse hook on %s (%s): %s", hooks.ClaudeName(call.Name), call.ID, text)
}

// recordedFeedback is what the recorded PostToolUse hooks of a call that
// has its result told the model, for a resumed turn whose feedback was
// not yet sent.
func (l *loop) recordedFeedback(call llm.ToolCall) string {
	var d decided
	for _, r := range l.hooked[hooks.PostToolUse+"\x00"+l.callKey(call.ID)] {
		d.add(r)
	}
	return postFeedback(call, d)
}

// stopEvent is the event a loop's final answer fires: SubagentStop for a
// sub-run, Stop for any other.
func (l *loop) stopEvent() string {
	if l.cfg.ParentRunID != "" {
		return hooks.SubagentStop
	}
	return hooks.Stop
}

// stopHooks fires the Stop hooks when the model gives a final answer. A
// hook that blocks (exit 2, decision block) makes the loop go on with its
// reason as the next user message: it returns "" then. Otherwise it
// returns the reason the iteration ends with: completed, or hook when a
// hook stopped the run.
func (l *loop) stopHooks(ctx context.Context) (string, error) {
	ev := l.stopEvent()
	if !l.cfg.Hooks.Has(ev) {
		return event.ReasonCompleted, nil
	}
	active := l.stopActive
	d, err := l.fire(ctx, ev, fmt.Sprintf("stop/%d", l.state.Turns), nil, hooks.Input{StopHookActive: &active}, nil)
	switch {
	case err != nil:
		return "", err
	case d.decision == hooks.Halt:
		l.hookStop = halted(ev, d)
		return event.ReasonHook, nil
	case d.decision != hooks.Block:
		return event.ReasonCompleted, nil
	}
	l.stopActive = true
	return "", l.addUser(ctx, d.reason(), nil)
}

// stopHookActive reports whether a Stop hook of the run already made
// its loop go on, as a resumed loop tells the next Stop hook.
func stopHookActive(recs []event.HookCompletedData) bool {
	for _, r := range recs {
		if (r.Event == hooks.Stop || r.Event == hooks.SubagentStop) && r.Decision == hooks.Block {
			return true
		}
	}
	return false
}

// preCompact fires the PreCompact hooks before a compaction, trigger
// "manual" when a person asked for it (agent chat's /compact), "auto"
// otherwise. They cannot stop it: the request would not fit without it,
// or the person asked.
func (l *loop) preCompact(ctx context.Context, trigger string) error {
	if !l.cfg.Hooks.Has(hooks.PreCompact) {
		return nil
	}
	how := "auto"
	if trigger == event.CompactAsked {
		how = "manual"
	}
	_, err := l.fire(ctx, hooks.PreCompact, fmt.Sprintf("compact/%d/%s", l.state.Turns, trigger), []string{how},
		hooks.Input{Trigger: how}, nil)
	return err
}

// notifyHooks fires the Notification hooks when the run starts to wait
// for a person: an approval or a question.
func (l *loop) notifyHooks(ctx context.Context, w event.RunWaitingData) error {
	in := hooks.Input{NotificationType: "permission_prompt",
		Message: fmt.Sprintf("agent needs your permission to use %s", hooks.ClaudeName(w.Tool))}
	switch w.Kind {
	case event.WaitApproval:
	case event.WaitQuestion:
		in.NotificationType, in.Message = "elicitation_dialog", "agent asks: "+w.Question
	default:
		return nil // a time or a signal: nobody is needed
	}
	if !l.cfg.Hooks.Has(hooks.Notification) {
		return nil
	}
	_, err := l.fire(ctx, hooks.Notification, "wait/"+w.WaitID, []string{in.NotificationType}, in, nil)
	return err
}
