package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"agent/event"
)

// Intent is a side effect a tool is about to cause. Key identifies the
// intended effect: the same key means the same effect, which must happen
// at most once.
type Intent struct {
	Tool        string
	Key         string
	ReceiptType string
	Args        json.RawMessage
}

// Outbox guards side effects. Begin durably records the intent before the
// effect starts. It returns:
//   - nil, nil: go ahead; afterwards the tool reports receipt.recorded
//     (done), effect.failed (certainly not done) or effect.unknown (may
//     have happened) to the outbox's Report if it has one, otherwise as
//     result events;
//   - a receipt, nil: the effect already happened; do not repeat it;
//   - a *DifferentError: the effect under this key happened with other
//     arguments; do not act, and say so;
//   - another error: do not act. ErrUnknownOutcome when an earlier identical
//     effect may or may not have happened; another error when the intent
//     could not be recorded (for a child: the parent is gone).
//
// The fast path implements it on the store; `agent runner` implements it
// with the effect.intent/ack exchange (docs/PROTOCOL.md#side-effects-intent-ack-outcome).
type Outbox interface {
	Begin(ctx context.Context, in Intent) (*event.ReceiptData, error)
}

// Reporter is an Outbox that takes a go-ahead effect's outcome at once,
// while its tool call is still open: a child's parent accepts an outcome
// only then (docs/PROTOCOL.md#what-the-parent-believes), and a result's events come after the call's
// tool.completed.
type Reporter interface {
	Report(ctx context.Context, e event.Event) error
}

// ErrUnknownOutcome means an identical effect was started before and it
// is not known whether it happened: it is not repeated automatically.
var ErrUnknownOutcome = errors.New("an identical earlier attempt has an unknown outcome")

// DifferentError means the effect under this key already happened with
// other arguments, e.g. an email to the same recipient with the same
// subject but another body. It is not sent: the key stays the same so a
// rephrased retry never repeats an effect, and the model is told, never
// falsely that its message went out.
type DifferentError struct {
	Receipt event.ReceiptData // the effect that happened
	Args    json.RawMessage   // the arguments it happened with
}

func (e *DifferentError) Error() string {
	return fmt.Sprintf("%s %s already happened with other arguments: %s", e.Receipt.Type, e.Receipt.Key, e.Args)
}

// SameEffect reports whether a call of tool with args asks for the effect
// that was made with the recorded arguments. The key arguments are equal
// by the key; the others must be equal too, runs of whitespace aside (a
// retry that reflows a body is the same email; one with another body is
// not). Unrecorded arguments (an older store) count as the same.
func SameEffect(tool string, recorded, args json.RawMessage) bool {
	if len(recorded) == 0 {
		return true
	}
	var a, b map[string]any
	if json.Unmarshal(recorded, &a) != nil || json.Unmarshal(args, &b) != nil {
		return bytes.Equal(recorded, args)
	}
	for _, e := range Effects {
		if e.Tool == tool {
			for _, k := range e.KeyArgs {
				delete(a, k)
				delete(b, k)
			}
		}
	}
	return reflect.DeepEqual(normalizeValues(a), normalizeValues(b))
}

// normalizeValues folds runs of whitespace in string values.
func normalizeValues(m map[string]any) map[string]any {
	for k, v := range m {
		if s, ok := v.(string); ok {
			m[k] = strings.Join(strings.Fields(s), " ")
		}
	}
	return m
}
