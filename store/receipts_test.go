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
	want.State, want.CreatedAt, want.UpdatedAt = event.StatusPending, created, created
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
	if got, _ := db.ReceiptByKey(ctx, "k1"); got.State != event.StatusUnknown || !got.UpdatedAt.Equal(clock.Now()) {
		t.Errorf("after MarkReceiptUnknown: %+v", got)
	}

	// The receipt turns up after all: done, keeping the tool and the
	// time the intent was first written.
	clock.Advance(time.Second)
	appendSeq(t, db, "run-1", receiptEvent("notify", 2, "email_sent", "k1", `{"message_id":"m1"}`))
	want.Attempt, want.State, want.Details, want.UpdatedAt = 2, event.StatusDone, json.RawMessage(`{"message_id":"m1"}`), clock.Now()
	if got, err := db.ReceiptByKey(ctx, "k1"); err != nil || !reflect.DeepEqual(*got, want) {
		t.Errorf("after receipt.recorded = %+v, %v\nwant %+v", got, err, want)
	}

	// A done receipt is proof: nothing makes it unknown again.
	if err := db.MarkReceiptUnknown(ctx, "k1"); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.ReceiptByKey(ctx, "k1"); got.State != event.StatusDone {
		t.Errorf("MarkReceiptUnknown of a done receipt made it %s", got.State)
	}
	if existing, err := db.AddIntent(ctx, intent); err != nil || existing == nil || existing.State != event.StatusDone {
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
				State: event.StatusDone, Details: json.RawMessage(`{"ts":"1"}`), Acked: true}},
		},
		{
			name: "recorded twice keeps one row",
			evs: []event.Event{
				receiptEvent("p", 1, "email_sent", "k1", `{"message_id":"a"}`),
				receiptEvent("p", 2, "email_sent", "k1", `{"message_id":"b"}`),
			},
			want: []Receipt{{Key: "k1", RunID: "run-1", PhaseID: "p", Attempt: 2, Type: "email_sent",
				State: event.StatusDone, Details: json.RawMessage(`{"message_id":"b"}`), Acked: true}},
		},
		{
			name: "without details keeps the old ones",
			evs: []event.Event{
				receiptEvent("p", 1, "email_sent", "k1", `{"message_id":"a"}`),
				receiptEvent("p", 1, "", "k1", ""),
			},
			want: []Receipt{{Key: "k1", RunID: "run-1", PhaseID: "p", Attempt: 1, Type: "email_sent",
				State: event.StatusDone, Details: json.RawMessage(`{"message_id":"a"}`), Acked: true}},
		},
		{
			name: "fast path has no phase",
			evs: []event.Event{
				receiptEvent("", 0, "email_sent", "k1", ""),
				receiptEvent("", 0, "email_sent", "k2", ""),
			},
			want: []Receipt{
				{Key: "k1", RunID: "run-1", Type: "email_sent", State: event.StatusDone, Acked: true},
				{Key: "k2", RunID: "run-1", Type: "email_sent", State: event.StatusDone, Acked: true},
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

func TestBeginEffect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createRun(t, db, "run-1")
	intent := Receipt{Key: "send_email-k1", RunID: "run-1", PhaseID: "notify", Attempt: 1, Tool: "send_email", Type: "email_sent"}

	// A new key goes ahead, pending.
	got, err := db.BeginEffect(ctx, intent, false)
	if err != nil || got != nil {
		t.Fatalf("new key: %v, %v; want go ahead", got, err)
	}
	// The same key again while pending: its outcome is lost, so unknown.
	if _, err := db.BeginEffect(ctx, intent, false); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("pending key again: %v, want ErrOutcomeUnknown", err)
	}
	if r, _ := db.ReceiptByKey(ctx, intent.Key); r.State != event.StatusUnknown {
		t.Fatalf("state = %s, want unknown", r.State)
	}
	// Still unknown without the user's say-so; with it, pending again.
	if _, err := db.BeginEffect(ctx, intent, false); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("unknown key: %v", err)
	}
	intent.Attempt = 3
	if got, err := db.BeginEffect(ctx, intent, true); err != nil || got != nil {
		t.Fatalf("resend unknown: %v, %v; want go ahead", got, err)
	}
	if r, _ := db.ReceiptByKey(ctx, intent.Key); r.State != event.StatusPending || r.Attempt != 3 {
		t.Fatalf("after resend: %+v", r)
	}
	// Its receipt makes it done; then it is never repeated, even when asked to resend.
	rec := event.New(event.ReceiptRecorded, event.ReceiptData{Type: "email_sent", Key: intent.Key, Details: json.RawMessage(`{"message_id":"m@x"}`)})
	rec.PhaseID, rec.Attempt = "notify", 3
	appendSeq(t, db, "run-1", rec)
	for _, resend := range []bool{false, true} {
		got, err := db.BeginEffect(ctx, intent, resend)
		if err != nil || got == nil || got.State != event.StatusDone || string(got.Details) != `{"message_id":"m@x"}` {
			t.Fatalf("done key (resend=%v): %+v, %v; want the receipt", resend, got, err)
		}
	}
}

func TestEffectFailedForgetsIntent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createRun(t, db, "run-1")
	intent := Receipt{Key: "slack_post-k", RunID: "run-1", Tool: "slack_post", Type: "slack_message_sent"}
	if _, err := db.BeginEffect(ctx, intent, false); err != nil {
		t.Fatal(err)
	}
	appendSeq(t, db, "run-1", event.New(event.EffectFailed, event.EffectFailedData{Key: intent.Key, Error: "channel_not_found"}))
	if _, err := db.ReceiptByKey(ctx, intent.Key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after effect.failed: %v, want the intent gone", err)
	}
	if got, err := db.BeginEffect(ctx, intent, false); err != nil || got != nil {
		t.Fatalf("retry after a certain failure: %v, %v; want go ahead", got, err)
	}
}

func TestMarkPendingUnknown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createRun(t, db, "run-1")
	createRun(t, db, "run-2")
	for _, r := range []Receipt{
		{Key: "a", RunID: "run-1", PhaseID: "p", Acked: true},
		{Key: "b", RunID: "run-1", PhaseID: "q", Acked: true},
		{Key: "c", RunID: "run-2", PhaseID: "p", Acked: true},
		// Recorded, but its go-ahead never went out: it cannot have happened.
		{Key: "d", RunID: "run-1", PhaseID: "p", Args: json.RawMessage(`{"to":"bob"}`)},
	} {
		if _, err := db.BeginEffect(ctx, r, false); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := db.MarkPendingUnknown(ctx, "run-1", "p"); err != nil || n != 1 {
		t.Fatalf("phase p: %d, %v", n, err)
	}
	if _, err := db.ReceiptByKey(ctx, "d"); !errors.Is(err, ErrNotFound) {
		t.Errorf("the unacked intent: %v, want it forgotten", err)
	}
	if n, err := db.MarkPendingUnknown(ctx, "run-1", ""); err != nil || n != 1 {
		t.Fatalf("whole run: %d, %v", n, err)
	}
	if r, _ := db.ReceiptByKey(ctx, "c"); r.State != event.StatusPending {
		t.Errorf("another run's intent changed: %+v", r)
	}
}

func TestAckEffect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createRun(t, db, "run-1")
	in := Receipt{Key: "k", RunID: "run-1", PhaseID: "p", Attempt: 1, Tool: "send_email", Type: "email_sent",
		Args: json.RawMessage(`{"to":"bob@example.com"}`)}
	if _, err := db.BeginEffect(ctx, in, false); err != nil {
		t.Fatal(err)
	}
	if r, _ := db.ReceiptByKey(ctx, "k"); r.Acked || string(r.Args) != `{"to":"bob@example.com"}` {
		t.Fatalf("after the intent: %+v, want unacked with its arguments", r)
	}
	if err := db.AckEffect(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if n, err := db.MarkPendingUnknown(ctx, "run-1", ""); err != nil || n != 1 {
		t.Fatalf("settle: %d, %v; want the acked intent unknown", n, err)
	}
	if err := db.AckEffect(ctx, "k"); !errors.Is(err, ErrNotFound) {
		t.Errorf("ack of an intent no longer pending: %v, want ErrNotFound", err)
	}
}
