package tools

import (
	"context"
	"encoding/json"
	"errors"

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
//     (done) or effect.failed (certainly not done) as result events;
//   - a receipt, nil: the effect already happened; do not repeat it;
//   - an error: do not act. ErrUnknownOutcome when an earlier identical
//     effect may or may not have happened; another error when the intent
//     could not be recorded (for a child: the parent is gone).
//
// The fast path implements it on the store; `agent runner` implements it
// with the effect.intent/ack exchange (DESIGN.md §6).
type Outbox interface {
	Begin(ctx context.Context, in Intent) (*event.ReceiptData, error)
}

// ErrUnknownOutcome means an identical effect was started before and it
// is not known whether it happened: it is not repeated automatically.
var ErrUnknownOutcome = errors.New("an identical earlier attempt has an unknown outcome")
