package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"agent/event"
)

// Notifications (docs/SCHEMA.md#notifications): each run event told to
// each [[notify]] channel goes through this outbox, under the rules of a
// side effect's (receipts.go): its intent (pending) is written before it
// is sent, its receipt (done) after, and one whose outcome was lost
// (unknown) is never sent again unless a person asks. Unlike a run's
// effects, which its driver makes under its lease, a notification is sent
// after the drive that recorded its event, by whichever process claims it,
// and retried on a schedule: so it is a table of its own, claimed for the
// length of one try.

// NotificationSent is the receipt type of a delivered notification.
const NotificationSent = "notification_sent"

// Notification is one event of a run told to one channel.
type Notification struct {
	Key    string
	RunID  string
	Event  string // waiting, completed, failed, job_failed
	Seq    int64  // the event's seq; 0 for a job's failure
	WaitID string // waiting: the wait it is about
	// Channel is the [[notify]] block, as JSON; Payload what is sent,
	// without the one-decision link each try makes anew.
	Channel json.RawMessage
	Payload json.RawMessage
	// State: event.StatusQueued (waits for NextAt), StatusPending (its
	// intent: being sent, until ClaimedUntil), StatusDone (its receipt),
	// StatusUnknown (its outcome was lost), StatusFailed (given up) or
	// StatusSkipped (the wait it was about was answered first).
	State        string
	Tries        int
	NextAt       time.Time // queued: when it is tried
	ClaimedUntil time.Time // pending: how long its sender may take
	LastError    string
	Details      json.RawMessage // done: what the channel answered
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// Receipt is a delivered notification's receipt.
func (n Notification) Receipt() event.ReceiptData {
	return event.ReceiptData{Type: NotificationSent, Key: n.Key, Details: n.Details}
}

// PlanNotifications queues ns to be sent now, each unless its key is
// there already: an event is told to a channel once however often it is
// planned. It returns how many were new.
func (db *DB) PlanNotifications(ctx context.Context, ns []Notification) (int, error) {
	if len(ns) == 0 {
		return 0, nil
	}
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("plan notifications: %w", err)
	}
	defer tx.Rollback()
	now := formatTime(db.now())
	added := 0
	for _, n := range ns {
		res, err := tx.ExecContext(ctx, `
			INSERT INTO notifications (key, run_id, event, seq, wait_id, channel_json, payload_json, state, next_at, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, 'queued', ?, ?, ?)
			ON CONFLICT (key) DO NOTHING`,
			n.Key, n.RunID, n.Event, n.Seq, n.WaitID, string(n.Channel), string(n.Payload), now, now, now)
		if err != nil {
			return 0, fmt.Errorf("plan notification %s: %w", n.Key, err)
		}
		if k, err := res.RowsAffected(); err == nil {
			added += int(k)
		}
	}
	return added, tx.Commit()
}

// DueNotifications returns the keys of the notifications a sender may
// claim at now (of one run, unless runID is ""): those queued until now,
// and those whose sender's claim ran out, which the claim settles. next
// is the soonest later time one falls due (zero if none).
func (db *DB) DueNotifications(ctx context.Context, runID string, now time.Time) (keys []string, next time.Time, err error) {
	rows, err := db.ro.QueryContext(ctx, `
		SELECT key, CASE WHEN state = 'queued' THEN next_at ELSE claimed_until END FROM notifications
		WHERE (state = 'queued' OR state = 'pending') AND (? = '' OR run_id = ?)
		ORDER BY created_at, key`, runID, runID)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("due notifications: %w", err)
	}
	defer rows.Close()
	cut := formatTime(now)
	for rows.Next() {
		var key, at string
		if err := rows.Scan(&key, &at); err != nil {
			return nil, time.Time{}, err
		}
		if at <= cut {
			keys = append(keys, key)
			continue
		}
		if t, err := time.Parse(timeLayout, at); err == nil && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	return keys, next, rows.Err()
}

// ClaimNotification takes a due notification for one try, until until:
// a queued one becomes pending (its intent), its tries counted, and is
// returned for the caller to send. One whose earlier sender's claim ran
// out while it was pending was perhaps sent: it becomes unknown and is
// returned as such, not to be sent. Any other (not due, claimed by a
// live sender, settled) is nil.
func (db *DB) ClaimNotification(ctx context.Context, key string, until time.Time) (*Notification, error) {
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("claim notification %s: %w", key, err)
	}
	defer tx.Rollback()
	now := formatTime(db.now())
	res, err := tx.ExecContext(ctx, `
		UPDATE notifications SET state = 'pending', claimed_until = ?, tries = tries + 1, updated_at = ?
		WHERE key = ? AND state = 'queued' AND next_at <= ?`,
		formatTime(until), now, key, now)
	if err != nil {
		return nil, fmt.Errorf("claim notification %s: %w", key, err)
	}
	if oneRow(res) != nil {
		res, err = tx.ExecContext(ctx, `
			UPDATE notifications SET state = 'unknown', claimed_until = NULL, updated_at = ?,
				last_error = 'the process sending it stopped before it knew whether it arrived'
			WHERE key = ? AND state = 'pending' AND claimed_until < ?`, now, key, now)
		if err != nil {
			return nil, fmt.Errorf("claim notification %s: %w", key, err)
		}
		if oneRow(res) != nil {
			return nil, nil
		}
	}
	n, err := getNotification(ctx, tx, key)
	if err != nil {
		return nil, fmt.Errorf("claim notification %s: %w", key, err)
	}
	return n, tx.Commit()
}

// NotificationSent records a claimed notification's receipt: it was
// delivered, and details say what the channel answered. It holds even if
// the claim ran out meanwhile and another process marked it unknown.
func (db *DB) NotificationSent(ctx context.Context, key string, details json.RawMessage) error {
	return db.settleNotification(ctx, key, `state = 'done', details_json = ?, last_error = ''`, rawOrNull(details))
}

// NotificationNotSent records a try that certainly did not deliver the
// notification: it is queued again for next, or given up (failed) when
// next is zero.
func (db *DB) NotificationNotSent(ctx context.Context, key, why string, next time.Time) error {
	if next.IsZero() {
		return db.settleNotification(ctx, key, `state = 'failed', last_error = ?`, why)
	}
	return db.settleNotification(ctx, key, `state = 'queued', next_at = ?, last_error = ?`, formatTime(next), why)
}

// NotificationUnknown records a try whose outcome was lost: it is never
// sent again unless a person asks (ResendNotification).
func (db *DB) NotificationUnknown(ctx context.Context, key, why string) error {
	return db.settleNotification(ctx, key, `state = 'unknown', last_error = ?`, why)
}

// SkipNotification records that a claimed notification is not sent: the
// wait it was about was answered first.
func (db *DB) SkipNotification(ctx context.Context, key, why string) error {
	return db.settleNotification(ctx, key, `state = 'skipped', last_error = ?`, why)
}

// settleNotification ends a try of a claimed notification with set.
func (db *DB) settleNotification(ctx context.Context, key, set string, args ...any) error {
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("notification %s: %w", key, err)
	}
	defer tx.Rollback()
	args = append(args, formatTime(db.now()), key)
	res, err := tx.ExecContext(ctx, `UPDATE notifications SET `+set+`, claimed_until = NULL, updated_at = ?
		WHERE key = ? AND state IN ('pending', 'unknown')`, args...)
	if err == nil {
		err = oneRow(res)
	}
	if err != nil {
		return fmt.Errorf("notification %s: %w", key, err)
	}
	return tx.Commit()
}

// ResendNotification queues again, now, a notification whose outcome is
// unknown: a person checked that it did not arrive and asks for it. The
// same key goes with it (a webhook's Idempotency-Key, an email's
// Message-ID), so a receiver that did get it can tell.
func (db *DB) ResendNotification(ctx context.Context, key string) error {
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("resend notification %s: %w", key, err)
	}
	defer tx.Rollback()
	now := formatTime(db.now())
	res, err := tx.ExecContext(ctx, `
		UPDATE notifications SET state = 'queued', next_at = ?, updated_at = ? WHERE key = ? AND state = 'unknown'`,
		now, now, key)
	if err == nil {
		err = oneRow(res)
	}
	if err != nil {
		return fmt.Errorf("resend notification %s (only one whose outcome is unknown): %w", key, err)
	}
	return tx.Commit()
}

// Notifications returns a run's notifications, oldest first
// (agent runs show).
func (db *DB) Notifications(ctx context.Context, runID string) ([]Notification, error) {
	rows, err := db.ro.QueryContext(ctx, `SELECT `+notificationColumns+` FROM notifications
		WHERE run_id = ? ORDER BY created_at, seq, key`, runID)
	if err != nil {
		return nil, fmt.Errorf("notifications of run %s: %w", runID, err)
	}
	defer rows.Close()
	var out []Notification
	for rows.Next() {
		n, err := scanNotification(rows)
		if err != nil {
			return nil, fmt.Errorf("notifications of run %s: %w", runID, err)
		}
		out = append(out, *n)
	}
	return out, rows.Err()
}

const notificationColumns = `key, run_id, event, seq, wait_id, channel_json, payload_json, state, tries,
	next_at, claimed_until, last_error, COALESCE(details_json, ''), created_at, updated_at`

func scanNotification(row interface{ Scan(...any) error }) (*Notification, error) {
	var n Notification
	var channel, payload, details string
	if err := row.Scan(&n.Key, &n.RunID, &n.Event, &n.Seq, &n.WaitID, &channel, &payload, &n.State, &n.Tries,
		timeValue{&n.NextAt}, timeValue{&n.ClaimedUntil}, &n.LastError, &details,
		timeValue{&n.CreatedAt}, timeValue{&n.UpdatedAt}); err != nil {
		return nil, err
	}
	n.Channel, n.Payload = json.RawMessage(channel), json.RawMessage(payload)
	if details != "" {
		n.Details = json.RawMessage(details)
	}
	return &n, nil
}

func getNotification(ctx context.Context, tx *txn, key string) (*Notification, error) {
	n, err := scanNotification(tx.QueryRowContext(ctx, `SELECT `+notificationColumns+` FROM notifications WHERE key = ?`, key))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	return n, err
}

// LastEvent returns the last event a run has stored: after a drive, the
// event it ended with. ErrNotFound if it has none.
func (db *DB) LastEvent(ctx context.Context, runID string) (event.Event, error) {
	rows, err := db.ro.QueryContext(ctx, `
		SELECT `+eventColumns+`
		FROM events WHERE run_id = ? ORDER BY seq DESC LIMIT 1`, runID)
	var evs []event.Event
	if err == nil {
		evs, err = scanEvents(rows)
	}
	if err != nil {
		return event.Event{}, fmt.Errorf("last event of run %s: %w", runID, err)
	}
	if len(evs) == 0 {
		return event.Event{}, fmt.Errorf("last event of run %s: %w", runID, ErrNotFound)
	}
	return evs[0], nil
}
