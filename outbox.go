package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"agent/adapter"
	"agent/event"
	"agent/store"
	"agent/tools"
)

// storeOutbox is the fast path's outbox: the intent is written to the
// store, in this process, before the side effect starts.
type storeOutbox struct {
	db     *store.DB
	runID  string
	resend bool // resume --resend-unknown: the user chose to repeat lost effects
}

func (o *storeOutbox) Begin(ctx context.Context, in tools.Intent) (*event.ReceiptData, error) {
	if o.db == nil {
		return nil, errors.New("the outbox is not ready")
	}
	r, err := o.db.BeginEffect(ctx, store.Receipt{Key: in.Key, RunID: o.runID, Tool: in.Tool, Type: in.ReceiptType}, o.resend)
	return receiptOrErr(r, err)
}

// receiptOrErr turns BeginEffect's answer into the tools' outbox answer.
func receiptOrErr(r *store.Receipt, err error) (*event.ReceiptData, error) {
	switch {
	case errors.Is(err, store.ErrOutcomeUnknown):
		return nil, tools.ErrUnknownOutcome
	case err != nil:
		return nil, err
	case r != nil:
		return &event.ReceiptData{Type: r.Type, Key: r.Key, Details: r.Details}, nil
	}
	return nil, nil
}

// childOutbox is the outbox of `agent runner`: the intent goes to the
// parent as effect.intent, and the effect starts only after the parent has
// persisted it and acked. If the parent is gone, nothing starts.
type childOutbox struct {
	sink    *childSink
	intents *adapter.Intents
	done    []event.ReceiptData // receipts the spec says this phase already has
}

func (o *childOutbox) Begin(ctx context.Context, in tools.Intent) (*event.ReceiptData, error) {
	for _, r := range o.done {
		if r.Key == in.Key {
			return &r, nil
		}
	}
	id := uuid.NewString()
	if err := o.sink.Emit(ctx, event.New(event.EffectIntent, event.EffectIntentData{
		ID: id, Tool: in.Tool, Key: in.Key, ReceiptType: in.ReceiptType, Args: in.Args,
	})); err != nil {
		return nil, err
	}
	ack, err := o.intents.Wait(ctx, id)
	switch {
	case err != nil:
		return nil, fmt.Errorf("the parent did not confirm the intent: %w", err)
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case ack.Receipt != nil:
		return ack.Receipt, nil
	case ack.Unknown:
		return nil, tools.ErrUnknownOutcome
	case !ack.Proceed:
		return nil, fmt.Errorf("the parent refused: %s", ack.Reason)
	}
	return nil, nil
}
