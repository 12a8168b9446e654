package store

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"agent/event"
)

func notification(key string) Notification {
	return Notification{Key: key, RunID: "r1", Event: "completed", Seq: 3,
		Channel: json.RawMessage(`{"webhook":"http://127.0.0.1:1/hook"}`), Payload: json.RawMessage(`{"text":"done"}`)}
}

// notificationOf is a notification's state as agent runs show lists it.
func notificationOf(t *testing.T, db *DB, key string) Notification {
	t.Helper()
	ns, err := db.Notifications(context.Background(), "r1")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ns {
		if n.Key == key {
			return n
		}
	}
	t.Fatalf("no notification %s in %+v", key, ns)
	return Notification{}
}

// A notification is planned once however often its event is told; one
// sender at a time holds it; a failed try is queued again for its retry
// and a delivered one is done, with its receipt, and never claimed again.
func TestNotificationIsSentOnce(t *testing.T) {
	t.Parallel()
	db, now := openClocked(t)
	*now = now.Truncate(time.Microsecond) // as the store keeps times
	ctx := context.Background()
	createRun(t, db, "r1")
	for range 2 {
		if _, err := db.PlanNotifications(ctx, []Notification{notification("n1")}); err != nil {
			t.Fatal(err)
		}
	}
	if ns, _ := db.Notifications(ctx, "r1"); len(ns) != 1 || ns[0].State != event.StatusQueued {
		t.Fatalf("planned twice: %+v; want one, queued", ns)
	}
	keys, _, err := db.DueNotifications(ctx, "", *now)
	if err != nil || len(keys) != 1 || keys[0] != "n1" {
		t.Fatalf("due = %v, %v", keys, err)
	}
	got, err := db.ClaimNotification(ctx, "n1", now.Add(time.Minute))
	if err != nil || got == nil || got.State != event.StatusPending || got.Tries != 1 {
		t.Fatalf("claim = %+v, %v; want it pending, first try", got, err)
	}
	if again, err := db.ClaimNotification(ctx, "n1", now.Add(time.Minute)); err != nil || again != nil {
		t.Fatalf("a second sender got %+v, %v; want nothing while the first holds it", again, err)
	}

	retry := now.Add(30 * time.Second)
	if err := db.NotificationNotSent(ctx, "n1", "connection refused", retry); err != nil {
		t.Fatal(err)
	}
	if keys, next, _ := db.DueNotifications(ctx, "r1", *now); len(keys) != 0 || !next.Equal(retry) {
		t.Fatalf("after a failure: due %v, next %v; want none until %v", keys, next, retry)
	}
	if n := notificationOf(t, db, "n1"); n.State != event.StatusQueued || n.LastError != "connection refused" {
		t.Fatalf("after a failure: %+v", n)
	}
	*now = retry
	if got, err = db.ClaimNotification(ctx, "n1", now.Add(time.Minute)); err != nil || got == nil || got.Tries != 2 {
		t.Fatalf("retry claim = %+v, %v", got, err)
	}
	if err := db.NotificationSent(ctx, "n1", json.RawMessage(`{"status":200}`)); err != nil {
		t.Fatal(err)
	}
	n := notificationOf(t, db, "n1")
	if n.State != event.StatusDone || n.LastError != "" || n.Receipt().Type != NotificationSent || string(n.Receipt().Details) != `{"status":200}` {
		t.Fatalf("delivered: %+v", n)
	}
	*now = now.Add(time.Hour)
	if keys, _, _ := db.DueNotifications(ctx, "", *now); len(keys) != 0 {
		t.Fatalf("a delivered notification is due again: %v", keys)
	}
	if got, err := db.ClaimNotification(ctx, "n1", now.Add(time.Minute)); got != nil || err != nil {
		t.Fatalf("a delivered notification was claimed again: %+v, %v", got, err)
	}
}

// A sender that died holding a notification (its claim ran out) may have
// sent it: the next claim makes it unknown, never sends it, and only a
// person's resend queues it again. A notification given up is failed.
func TestNotificationWhoseSenderDiedIsUnknown(t *testing.T) {
	t.Parallel()
	db, now := openClocked(t)
	ctx := context.Background()
	createRun(t, db, "r1")
	if _, err := db.PlanNotifications(ctx, []Notification{notification("n1"), notification("n2")}); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.ClaimNotification(ctx, "n1", now.Add(time.Minute)); got == nil {
		t.Fatal("not claimed")
	}
	*now = now.Add(2 * time.Minute) // the sender never said
	keys, _, _ := db.DueNotifications(ctx, "r1", *now)
	if strings.Join(keys, " ") != "n1 n2" {
		t.Fatalf("due = %v; want the dead sender's too, to settle it", keys)
	}
	got, err := db.ClaimNotification(ctx, "n1", now.Add(time.Minute))
	if err != nil || got == nil || got.State != event.StatusUnknown || got.Tries != 1 {
		t.Fatalf("claim after the sender died = %+v, %v; want unknown, not tried again", got, err)
	}
	if got, _ := db.ClaimNotification(ctx, "n1", now.Add(time.Minute)); got != nil {
		t.Fatalf("an unknown notification was claimed: %+v", got)
	}
	if err := db.ResendNotification(ctx, "n2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("resend of a queued one: %v; want refused", err)
	}
	if err := db.ResendNotification(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.ClaimNotification(ctx, "n1", now.Add(time.Minute)); got == nil || got.State != event.StatusPending || got.Tries != 2 {
		t.Fatalf("after the person's resend: %+v; want it sent again", got)
	}

	if got, _ := db.ClaimNotification(ctx, "n2", now.Add(time.Minute)); got == nil {
		t.Fatal("n2 not claimed")
	}
	if err := db.NotificationNotSent(ctx, "n2", "refused", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if n := notificationOf(t, db, "n2"); n.State != event.StatusFailed || n.LastError != "refused" {
		t.Fatalf("given up: %+v", n)
	}
}

// A link decides its wait once, until the wait's deadline; the store
// keeps no usable token.
func TestWaitLinkDecidesOnce(t *testing.T) {
	t.Parallel()
	db, now := openClocked(t)
	ctx := context.Background()
	createRun(t, db, "r1")
	until := now.Add(time.Hour).Truncate(time.Second)
	appendOne(t, db, "r1", event.New(event.RunWaiting, event.RunWaitingData{WaitID: "w1", Kind: event.WaitApproval,
		Until: until.Format(time.RFC3339), OnTimeout: event.OnTimeoutDeny, Tool: "bash"}))
	const token = "the-token"
	if err := db.CreateWaitLink(ctx, token, "r1", "w1", until); err != nil {
		t.Fatal(err)
	}
	var stored string
	if err := db.ro.QueryRowContext(ctx, `SELECT token_hash FROM wait_links`).Scan(&stored); err != nil || strings.Contains(stored, token) {
		t.Fatalf("stored %q, %v; want only a hash", stored, err)
	}
	if _, _, err := db.LinkedWait(ctx, "forged"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("forged token: %v", err)
	}
	l, w, err := db.LinkedWait(ctx, token)
	if err != nil || l.WaitID != "w1" || w.Waiting.Tool != "bash" || !l.UsedAt.IsZero() {
		t.Fatalf("link = %+v %+v, %v", l, w, err)
	}
	if _, _, err := db.LinkedWait(ctx, token); err != nil {
		t.Fatalf("looking twice: %v; a look uses nothing", err)
	}
	if _, w, err := db.UseWaitLink(ctx, token); err != nil || w.Waiting.WaitID != "w1" {
		t.Fatalf("use = %+v, %v", w, err)
	}
	if _, _, err := db.UseWaitLink(ctx, token); !errors.Is(err, ErrLinkUsed) {
		t.Fatalf("second use: %v; want ErrLinkUsed", err)
	}
	if _, _, err := db.LinkedWait(ctx, token); !errors.Is(err, ErrLinkUsed) {
		t.Fatalf("look after use: %v; want ErrLinkUsed", err)
	}

	if err := db.CreateWaitLink(ctx, "second", "r1", "w1", until); err != nil {
		t.Fatal(err)
	}
	*now = until
	if _, _, err := db.UseWaitLink(ctx, "second"); !errors.Is(err, ErrLinkExpired) {
		t.Fatalf("use at the deadline: %v; want ErrLinkExpired", err)
	}
}
