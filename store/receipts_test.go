package store

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"agent/event"
)

func receiptEvent(phaseID string, attempt int, typ, key, details string) event.Event {
	d := event.ReceiptData{Type: typ, Key: key}
	if details != "" {
		d.Details = json.RawMessage(details)
	}
	return phaseEvent(event.ReceiptRecorded, phaseID, attempt, d)
}

func TestReceiptOutbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	clock := newClock()
	db.Now = clock.Now
	createRun(t, db, "run-1")

	intent := Receipt{Key: "k1", RunID: "run-1", PhaseID: "notify", Attempt: 1, Tool: "send_email", Type: "email_sent"}
	existing, err := db.AddIntent(ctx, intent)
	if err != nil || existing != nil {
		t.Fatalf("AddIntent of a new key = %+v, %v; want nil, nil", existing, err)
	}
	created := clock.Now()
	want := intent
	want.State, want.CreatedAt, want.UpdatedAt = ReceiptPending, created, created
	if got, err := db.ReceiptByKey(ctx, "k1"); err != nil || !reflect.DeepEqual(*got, want) {
		t.Fatalf("ReceiptByKey = %+v, %v\nwant %+v", got, err, want)
	}

	// The same key again, even from another attempt, changes nothing and
	// says what is already there.
	clock.Advance(time.Second)
	again := intent
	again.Attempt, again.Tool = 2, "other_tool"
	existing, err = db.AddIntent(ctx, again)
	if err != nil || existing == nil || !reflect.DeepEqual(*existing, want) {
		t.Fatalf("AddIntent of an existing key = %+v, %v\nwant %+v", existing, err, want)
	}

	// The child died before reporting: the outcome is unknown.
	if err := db.MarkReceiptUnknown(ctx, "k1"); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.ReceiptByKey(ctx, "k1"); got.State != ReceiptUnknown || !got.UpdatedAt.Equal(clock.Now()) {
		t.Errorf("after MarkReceiptUnknown: %+v", got)
	}

	// The receipt turns up after all: done, keeping the tool and the
	// time the intent was first written.
	clock.Advance(time.Second)
	appendSeq(t, db, "run-1", receiptEvent("notify", 2, "email_sent", "k1", `{"message_id":"m1"}`))
	want.Attempt, want.State, want.Details, want.UpdatedAt = 2, ReceiptDone, json.RawMessage(`{"message_id":"m1"}`), clock.Now()
	if got, err := db.ReceiptByKey(ctx, "k1"); err != nil || !reflect.DeepEqual(*got, want) {
		t.Errorf("after receipt.recorded = %+v, %v\nwant %+v", got, err, want)
	}

	// A done receipt is proof: nothing makes it unknown again.
	if err := db.MarkReceiptUnknown(ctx, "k1"); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.ReceiptByKey(ctx, "k1"); got.State != ReceiptDone {
		t.Errorf("MarkReceiptUnknown of a done receipt made it %s", got.State)
	}
	if existing, err := db.AddIntent(ctx, intent); err != nil || existing == nil || existing.State != ReceiptDone {
		t.Errorf("AddIntent of a done key = %+v, %v; want the done receipt", existing, err)
	}

	if _, err := db.ReceiptByKey(ctx, "missing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("ReceiptByKey of a missing key: err = %v, want ErrNotFound", err)
	}
	if err := db.MarkReceiptUnknown(ctx, "missing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("MarkReceiptUnknown of a missing key: err = %v, want ErrNotFound", err)
	}
	if _, err := db.AddIntent(ctx, Receipt{RunID: "run-1"}); err == nil {
		t.Error("AddIntent without a key succeeded")
	}
}

func TestReceiptRecordedUpserts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name string
		evs  []event.Event
		want []Receipt // times not compared
	}{
		{
			name: "without an intent",
			evs:  []event.Event{receiptEvent("p", 1, "slack_message_sent", "k1", `{"ts":"1"}`)},
			want: []Receipt{{Key: "k1", RunID: "run-1", PhaseID: "p", Attempt: 1, Type: "slack_message_sent",
				State: ReceiptDone, Details: json.RawMessage(`{"ts":"1"}`)}},
		},
		{
			name: "recorded twice keeps one row",
			evs: []event.Event{
				receiptEvent("p", 1, "email_sent", "k1", `{"message_id":"a"}`),
				receiptEvent("p", 2, "email_sent", "k1", `{"message_id":"b"}`),
			},
			want: []Receipt{{Key: "k1", RunID: "run-1", PhaseID: "p", Attempt: 2, Type: "email_sent",
				State: ReceiptDone, Details: json.RawMessage(`{"message_id":"b"}`)}},
		},
		{
			name: "without details keeps the old ones",
			evs: []event.Event{
				receiptEvent("p", 1, "email_sent", "k1", `{"message_id":"a"}`),
				receiptEvent("p", 1, "", "k1", ""),
			},
			want: []Receipt{{Key: "k1", RunID: "run-1", PhaseID: "p", Attempt: 1, Type: "email_sent",
				State: ReceiptDone, Details: json.RawMessage(`{"message_id":"a"}`)}},
		},
		{
			name: "fast path has no phase",
			evs: []event.Event{
				receiptEvent("", 0, "email_sent", "k1", ""),
				receiptEvent("", 0, "email_sent", "k2", ""),
			},
			want: []Receipt{
				{Key: "k1", RunID: "run-1", Type: "email_sent", State: ReceiptDone},
				{Key: "k2", RunID: "run-1", Type: "email_sent", State: ReceiptDone},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db := openTest(t)
			createRun(t, db, "run-1")
			appendSeq(t, db, "run-1", tt.evs...)
			got, err := db.Receipts(ctx, "run-1", "")
			if err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if got[i].CreatedAt.IsZero() || got[i].UpdatedAt.IsZero() {
					t.Errorf("receipt %s has no times: %+v", got[i].Key, got[i])
				}
				got[i].CreatedAt, got[i].UpdatedAt = time.Time{}, time.Time{}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("receipts =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}
