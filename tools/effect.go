package tools

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/mail"
	"os"
	"strings"

	"agent/event"
)

// Side-effecting tools act on the world (send an email, post to Slack), so
// they must act at most once even when a phase is retried or the process
// crashes. They all share one flow (effectTool.Run): decode and check the
// arguments, check the configuration, record the intent in the Outbox,
// perform, and report a receipt or a failure as result events. A new
// side-effecting tool adds a row to Effects and a performer; nothing else
// changes.

// Effect describes a side-effecting tool.
type Effect struct {
	Tool        string   // tool name, e.g. "send_email"
	ReceiptType string   // receipt recorded when the effect happened, e.g. "email_sent"
	KeyArgs     []string // arguments that identify the intended effect
	Env         []string // environment the tool needs; unset means it is not offered unless asked for
	NewOne      string   // how the model makes a new effect rather than repeat this one
}

// Effects are the side-effecting tools.
var Effects = []Effect{
	{Tool: "send_email", ReceiptType: "email_sent", KeyArgs: []string{"to", "subject"}, Env: []string{"AGENT_SMTP_ADDR", "AGENT_SMTP_FROM"},
		NewOne: "give it a different subject"},
	{Tool: "slack_post", ReceiptType: "slack_message_sent", KeyArgs: []string{"channel", "text"}, Env: []string{"AGENT_SLACK_TOKEN"},
		NewOne: "post a different text"},
}

// Unconfigured returns the side-effecting tools whose environment is not
// set (getenv nil means os.Getenv). Callers leave them out of the tools
// offered to the model unless the user names them in --allow-tools, in
// which case a call gets a clear "not configured" result.
func Unconfigured(getenv func(string) string) []string {
	if getenv == nil {
		getenv = os.Getenv
	}
	var out []string
	for _, e := range Effects {
		for _, v := range e.Env {
			if strings.TrimSpace(getenv(v)) == "" {
				out = append(out, e.Tool)
				break
			}
		}
	}
	return out
}

// WithoutUnconfigured adds to deny the unconfigured side-effecting tools
// that allow does not name.
func WithoutUnconfigured(allow, deny []string, getenv func(string) string) []string {
	for _, name := range Unconfigured(getenv) {
		if !contains(allow, name) && !contains(deny, name) {
			deny = append(deny, name)
		}
	}
	return deny
}

// EffectScope is where an effect's key is stable: within one run and
// phase, the same key arguments mean the same effect, across attempts and
// crashes.
type EffectScope struct {
	RunID   string
	PhaseID string
}

// EffectOptions are for tests and unusual setups.
type EffectOptions struct {
	TLS        *tls.Config  // base TLS configuration for SMTP STARTTLS, e.g. with RootCAs
	HTTPClient *http.Client // client for the Slack API; its Timeout defaults to 30s
}

// EffectKey is the idempotency key of effect e called with args in scope:
// the tool name and the first 24 hex digits of a SHA-256 over the scope,
// the tool and the normalized key arguments.
func EffectKey(scope EffectScope, e Effect, args map[string]any) string {
	h := sha256.New()
	for _, s := range []string{scope.RunID, scope.PhaseID, e.Tool} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	for _, name := range e.KeyArgs {
		h.Write([]byte(normalizeKeyArg(name, args[name])))
		h.Write([]byte{0})
	}
	return e.Tool + "-" + hex.EncodeToString(h.Sum(nil))[:24]
}

// normalizeKeyArg makes trivially different spellings of the same effect
// produce the same key: surrounding spaces never matter, an email
// recipient is compared by lowercased address, and runs of whitespace in a
// subject or message text count as one space. Other arguments are only
// trimmed, so distinct effects are never merged.
func normalizeKeyArg(name string, v any) string {
	s, ok := v.(string)
	if !ok {
		if v == nil {
			return ""
		}
		b, _ := json.Marshal(v) // numbers, booleans, objects (sorted keys)
		return string(b)
	}
	s = strings.TrimSpace(s)
	switch name {
	case "to":
		if a, err := mail.ParseAddress(s); err == nil {
			s = a.Address
		}
		s = strings.ToLower(s)
	case "subject", "text":
		s = strings.Join(strings.Fields(s), " ")
	}
	return s
}

// EffectTools returns send_email and slack_post for one run and phase.
// Their configuration comes from getenv (nil means os.Getenv); a missing
// configuration is reported when the tool is called, not here.
func EffectTools(scope EffectScope, outbox Outbox, getenv func(string) string, opts ...EffectOptions) []Tool {
	if getenv == nil {
		getenv = os.Getenv
	}
	var o EffectOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	email := newSendEmail(getenv, o)
	slack := newSlackPost(getenv, o)
	return []Tool{
		newEffectTool("send_email", sendEmailDef, scope, outbox, email.prepare),
		newEffectTool("slack_post", slackPostDef, scope, outbox, slack.prepare),
	}
}

// Prepare decodes and checks a call's arguments and the tool's
// configuration, and returns the action. Its error becomes the result and
// nothing is recorded.
type Prepare func(args json.RawMessage) (Perform, error)

// Perform causes the effect. key is the effect's idempotency key, for
// receivers that deduplicate (an email's Message-ID). An error wrapped by
// NotSent means the effect certainly did not happen; any other error
// means its outcome is unknown.
type Perform func(ctx context.Context, key string) (Sent, error)

// Sent is what a performer reports when the effect happened.
type Sent struct {
	Summary string // what the model reads, e.g. "email sent to …"
	Details any    // the receipt's details, marshalled to JSON
}

// notSentError marks a failure after which the effect certainly did not
// happen (refused before anything was accepted), so it may be retried.
type notSentError struct{ err error }

// NotSent marks err as a failure after which the effect certainly did not
// happen, so the model may fix the problem and call again.
func NotSent(err error) error         { return &notSentError{err} }
func (e *notSentError) Error() string { return e.err.Error() }
func (e *notSentError) Unwrap() error { return e.err }

// IsNotSent reports whether err says the effect certainly did not happen.
func IsNotSent(err error) bool {
	var ns *notSentError
	return errors.As(err, &ns)
}

// effectTool is a side-effecting tool: one Effects row, its definition and
// its prepare step, run through the shared at-most-once flow.
type effectTool struct {
	effect  Effect
	def     Definition
	scope   EffectScope
	outbox  Outbox
	prepare Prepare
}

func newEffectTool(tool string, def Definition, scope EffectScope, outbox Outbox, prepare Prepare) *effectTool {
	return &effectTool{effect: mustEffect(tool), def: def, scope: scope, outbox: outbox, prepare: prepare}
}

// NewEffectTool makes a side-effecting tool of an effect defined outside
// this package (an MCP tool listed under effects): it runs through the
// same at-most-once flow as send_email.
func NewEffectTool(e Effect, def Definition, scope EffectScope, outbox Outbox, prepare Prepare) Tool {
	return &effectTool{effect: e, def: def, scope: scope, outbox: outbox, prepare: prepare}
}

func mustEffect(tool string) Effect {
	for _, e := range Effects {
		if e.Tool == tool {
			return e
		}
	}
	panic("tools: no Effects row for " + tool)
}

func (t *effectTool) Definition() Definition { return t.def }

// ReadOnly is false: an effect must never be re-run blindly after a crash.
func (t *effectTool) ReadOnly() bool { return false }

func (t *effectTool) Run(ctx context.Context, _ *Workspace, args json.RawMessage) Result {
	name := t.effect.Tool
	perform, err := t.prepare(args)
	if err != nil {
		return errorf("%v", err)
	}
	if t.outbox == nil {
		return errorf("%s is unavailable in this run: side effects need an outbox to record them", name)
	}
	var argMap map[string]any
	if err := json.Unmarshal(args, &argMap); err != nil { // prepare already validated args
		return errorf("invalid arguments for %s: %v", name, err)
	}
	key := EffectKey(t.scope, t.effect, argMap)
	var compact bytes.Buffer
	if err := json.Compact(&compact, args); err != nil {
		return errorf("invalid arguments for %s: %v", name, err)
	}

	receipt, err := t.outbox.Begin(ctx, Intent{Tool: name, Key: key, ReceiptType: t.effect.ReceiptType, Args: compact.Bytes()})
	var different *DifferentError
	switch {
	case errors.As(err, &different):
		return errorf("not sent: a %s%s was already sent in this phase with different content (%s); "+
			"nothing was sent now, and the earlier one stands. To send a new message, make it a new one: %s.",
			name, t.sameKey(" with the same %s"), describeReceipt(&different.Receipt), t.effect.NewOne)
	case errors.Is(err, ErrUnknownOutcome):
		return errorf("not sent: an identical %s call%s was started earlier in this phase and its outcome is unknown: "+
			"it may or may not have been delivered. Do not try to send it another way (another tool, reworded arguments, bash). "+
			"A person can check and re-send it with `agent resume %s --resend-unknown`.",
			name, t.sameKey(" (same %s)"), t.runRef())
	case err != nil:
		return errorf("not sent: %v", err)
	case receipt != nil:
		return Result{Output: fmt.Sprintf("already sent earlier in this phase (%s); not sent again", describeReceipt(receipt))}
	}
	return t.report(ctx, t.perform(ctx, perform, key))
}

// report hands the outcome's event to an outbox that takes it while the
// call is open, rather than leave it to follow the call's tool.completed.
func (t *effectTool) report(ctx context.Context, res Result) Result {
	r, ok := t.outbox.(Reporter)
	if !ok {
		return res
	}
	for _, e := range res.Events {
		if err := r.Report(ctx, e); err != nil {
			res.Output += fmt.Sprintf(" (its outcome could not be recorded: %v)", err)
		}
	}
	res.Events = nil
	return res
}

// perform causes the effect whose intent is recorded under key, and says
// what happened as the result and its events.
func (t *effectTool) perform(ctx context.Context, perform Perform, key string) Result {
	name := t.effect.Tool
	done, err := perform(ctx, key)
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("%w (interrupted: %v)", err, context.Cause(ctx))
	}
	switch {
	case err != nil && IsNotSent(err):
		res := errorf("not sent: %v. Nothing was delivered; you may fix the problem and call %s again.", err, name)
		res.Events = []event.Event{event.New(event.EffectFailed, event.EffectFailedData{Key: key, Error: err.Error()})}
		return res
	case err != nil:
		// The intent becomes unknown: no retry repeats an effect that may
		// have happened, and no later receipt makes it done.
		res := errorf("outcome unknown: %v. The %s may or may not have been delivered, so it will not be retried. "+
			"Do not try to send it another way; a person can check and re-send it with `agent resume %s --resend-unknown`.",
			err, name, t.runRef())
		res.Events = []event.Event{event.New(event.EffectUnknown, event.EffectUnknownData{Key: key, Error: err.Error()})}
		return res
	}
	details, err := json.Marshal(done.Details)
	if err != nil { // performers return plain structs; this is a programming error
		panic(fmt.Sprintf("%s: marshal receipt Details: %v", name, err))
	}
	return Result{
		Output: done.Summary,
		Events: []event.Event{event.New(event.ReceiptRecorded, event.ReceiptData{
			Type: t.effect.ReceiptType, Key: key, Details: details,
		})},
	}
}

// ResendEffect performs a recorded side effect again under its own key,
// for a user who chose to (resume --resend-unknown), once the caller has
// made its intent pending again; and a notification by email or Slack
// (package notify), under the notification's key. The result and its
// events are those of a call of the tool.
func ResendEffect(ctx context.Context, tool, key string, args json.RawMessage, getenv func(string) string, opts ...EffectOptions) Result {
	for _, t := range EffectTools(EffectScope{}, nil, getenv, opts...) {
		if t.Definition().Name == tool {
			res, _ := Resend(ctx, t, key, args)
			return res
		}
	}
	return errorf("%s is not a side-effecting tool", tool)
}

// Resend performs t's effect again under key, without asking an outbox;
// ok is false when t is no side-effecting tool.
func Resend(ctx context.Context, t Tool, key string, args json.RawMessage) (res Result, ok bool) {
	et, ok := t.(*effectTool)
	if !ok {
		return Result{}, false
	}
	perform, err := et.prepare(args)
	if err != nil {
		return errorf("%v", err), true
	}
	return et.perform(ctx, perform, key), true
}

// runRef names the run for the resume hint.
// sameKey says, in format, which arguments make two calls the same
// effect; "" for an effect without key arguments (one per run and phase).
func (t *effectTool) sameKey(format string) string {
	if len(t.effect.KeyArgs) == 0 {
		return ""
	}
	return fmt.Sprintf(format, strings.Join(t.effect.KeyArgs, " and "))
}

func (t *effectTool) runRef() string {
	if t.scope.RunID == "" {
		return "RUN_ID"
	}
	return t.scope.RunID
}

func describeReceipt(r *event.ReceiptData) string {
	if len(r.Details) == 0 || string(r.Details) == "null" {
		return r.Type
	}
	return r.Type + " " + string(r.Details)
}
