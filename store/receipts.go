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

// Receipt is one row of receipts, keyed by the side effect's idempotency
// key, which is unique across all runs.
type Receipt struct {
	Key     string
	RunID   string
	PhaseID string
	Attempt int
	Tool    string // the tool that declared the intent; "" if only the receipt was seen
	Type    string // e.g. email_sent
	// State: an intent is written event.StatusPending before a side effect
	// starts; its receipt.recorded makes it event.StatusDone. A pending
	// intent whose outcome was lost (the child died mid-effect, or it
	// reported effect.unknown) is event.StatusUnknown, so it is neither
	// repeated blindly nor counted as proof.
	State   string
	Details json.RawMessage
	// Args are the tool arguments the intent was made with, so the user
	// can have it sent again (resume --resend-unknown).
	Args json.RawMessage
	// Acked says the go-ahead may have reached the process that acts on
	// the intent. A pending intent that was never acked cannot have
	// happened: recovery forgets it instead of marking it unknown.
	Acked bool
	// LeaseOwner, when set, is the lease the intent is made under: it is
	// refused (ErrLeaseLost) unless LeaseOwner still holds the run, or,
	// with AttemptLease, the phase attempt (a worker running it from the
	// attempt queue). Not stored.
	LeaseOwner   string
	AttemptLease bool
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// IntentReceipt is the receipt a child's effect.intent asks for, in a run
// (and phase attempt, for a harness).
func IntentReceipt(runID, phaseID string, attempt int, in event.EffectIntentData) Receipt {
	return Receipt{Key: in.Key, RunID: runID, PhaseID: phaseID, Attempt: attempt, Tool: in.Tool, Type: in.ReceiptType, Args: in.Args}
}

// Receipts returns the receipts of one phase of a run, or of the whole run
// when phaseID is "", in the order they were first written.
func (db *DB) Receipts(ctx context.Context, runID, phaseID string) ([]Receipt, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("receipts of run %s: %w", runID, err)
	}
	defer tx.Rollback()
	rs, err := listReceipts(ctx, tx, runID, phaseID)
	if err != nil {
		return nil, fmt.Errorf("receipts of run %s: %w", runID, err)
	}
	return rs, tx.Commit()
}

// ReceiptByKey returns the receipt with this idempotency key, or an error
// wrapping ErrNotFound.
func (db *DB) ReceiptByKey(ctx context.Context, key string) (*Receipt, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("receipt %s: %w", key, err)
	}
	defer tx.Rollback()
	r, err := getReceipt(ctx, tx, key)
	if err != nil {
		return nil, fmt.Errorf("receipt %s: %w", key, err)
	}
	return r, tx.Commit()
}

// AddIntent records that a side effect is about to start: it inserts r as
// pending and returns nil if r.Key is new. If the key exists, the effect
// was already attempted, so it changes nothing and returns the existing
// row for the caller to decide (done: skip and reuse; pending or unknown:
// do not repeat blindly).
func (db *DB) AddIntent(ctx context.Context, r Receipt) (existing *Receipt, err error) {
	if r.Key == "" || r.RunID == "" {
		return nil, errors.New("add intent: key and run id are required")
	}
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("add intent %s: %w", r.Key, err)
	}
	defer tx.Rollback()
	existing, err = addIntent(ctx, tx, r, db.now())
	if err != nil {
		return nil, fmt.Errorf("add intent %s: %w", r.Key, err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("add intent %s: %w", r.Key, err)
	}
	return existing, nil
}

// MarkReceiptUnknown marks a pending intent whose outcome was lost. A done
// or unknown receipt is left as it is; a missing one is ErrNotFound.
func (db *DB) MarkReceiptUnknown(ctx context.Context, key string) error {
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("mark receipt %s unknown: %w", key, err)
	}
	defer tx.Rollback()
	if err := markReceiptUnknown(ctx, tx, key, db.now()); err != nil {
		return fmt.Errorf("mark receipt %s unknown: %w", key, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("mark receipt %s unknown: %w", key, err)
	}
	return nil
}

func addIntent(ctx context.Context, tx *txn, r Receipt, now time.Time) (*Receipt, error) {
	switch {
	case r.LeaseOwner != "" && r.AttemptLease:
		if err := fenceAttempt(ctx, tx, AttemptKey{RunID: r.RunID, PhaseID: r.PhaseID, Attempt: r.Attempt}, r.LeaseOwner); err != nil {
			return nil, err
		}
	case r.LeaseOwner != "":
		if err := fence(ctx, tx, r.RunID, r.LeaseOwner); err != nil {
			return nil, err
		}
	}
	res, err := tx.ExecContext(ctx, `
		INSERT INTO receipts (key, run_id, phase_id, attempt, tool, type, state, details_json, args_json, acked, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?)
		ON CONFLICT (key) DO NOTHING`,
		r.Key, r.RunID, r.PhaseID, r.Attempt, r.Tool, r.Type, rawOrNull(r.Details), rawOrNull(r.Args), r.Acked,
		formatTime(now), formatTime(now))
	if err != nil {
		return nil, err
	}
	if err := oneRow(res); !errors.Is(err, ErrNotFound) {
		return nil, err // inserted, or a real error
	}
	return getReceipt(ctx, tx, r.Key)
}

func markReceiptUnknown(ctx context.Context, tx *txn, key string, now time.Time) error {
	res, err := tx.ExecContext(ctx, `
		UPDATE receipts SET state = 'unknown', updated_at = ? WHERE key = ? AND state = 'pending'`,
		formatTime(now), key)
	if err != nil {
		return err
	}
	if err := oneRow(res); !errors.Is(err, ErrNotFound) {
		return err
	}
	_, err = getReceipt(ctx, tx, key)
	return err
}

// recordReceipt projects receipt.recorded: the effect is done, whether or
// not its intent was seen. The tool and the first-written time are kept.
func recordReceipt(ctx context.Context, tx *txn, e event.Event, d event.ReceiptData, now time.Time) error {
	_, err := tx.ExecContext(ctx, `
		INSERT INTO receipts (key, run_id, phase_id, attempt, type, state, details_json, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, 'done', ?, ?, ?)
		ON CONFLICT (key) DO UPDATE SET
			run_id = excluded.run_id, phase_id = excluded.phase_id, attempt = excluded.attempt,
			type = COALESCE(NULLIF(excluded.type, ''), receipts.type), state = 'done',
			details_json = COALESCE(excluded.details_json, receipts.details_json),
			updated_at = excluded.updated_at`,
		d.Key, e.RunID, e.PhaseID, e.Attempt, d.Type, rawOrNull(d.Details),
		formatTime(e.TS), formatTime(now))
	return err
}

const receiptColumns = `key, run_id, phase_id, attempt, tool, type, state, COALESCE(details_json, ''),
	COALESCE(args_json, ''), acked, created_at, updated_at`

func scanReceipt(row interface{ Scan(...any) error }) (*Receipt, error) {
	var r Receipt
	var details, args string
	if err := row.Scan(&r.Key, &r.RunID, &r.PhaseID, &r.Attempt, &r.Tool, &r.Type, &r.State, &details,
		&args, &r.Acked, timeValue{&r.CreatedAt}, timeValue{&r.UpdatedAt}); err != nil {
		return nil, err
	}
	if details != "" {
		r.Details = json.RawMessage(details)
	}
	if args != "" {
		r.Args = json.RawMessage(args)
	}
	return &r, nil
}

func getReceipt(ctx context.Context, tx *txn, key string) (*Receipt, error) {
	r, err := scanReceipt(tx.QueryRowContext(ctx, `SELECT `+receiptColumns+` FROM receipts WHERE key = ?`, key))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	return r, err
}

func listReceipts(ctx context.Context, tx *txn, runID, phaseID string) ([]Receipt, error) {
	rows, err := tx.QueryContext(ctx, `
		SELECT `+receiptColumns+` FROM receipts
		WHERE run_id = ? AND (? = '' OR phase_id = ?) ORDER BY rowid`, runID, phaseID, phaseID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var rs []Receipt
	for rows.Next() {
		r, err := scanReceipt(rows)
		if err != nil {
			return nil, err
		}
		rs = append(rs, *r)
	}
	return rs, rows.Err()
}

// rawOrNull stores empty JSON as NULL.
func rawOrNull(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	return string(raw)
}

// ErrOutcomeUnknown means an identical side effect was started before and
// its outcome was lost: it must not be repeated automatically.
var ErrOutcomeUnknown = errors.New("an earlier identical side effect has an unknown outcome")

// BeginEffect decides, atomically, whether the side effect r describes may
// start, and records the intent (with r.Args and r.Acked) before it does:
//   - a new key is inserted pending: go ahead (nil, nil);
//   - a done key returns its receipt: it happened, do not repeat it;
//   - a pending or unknown key is an earlier attempt whose outcome was
//     lost (the one attempt that could be running it is this caller's
//     predecessor, now dead): it becomes unknown and ErrOutcomeUnknown is
//     returned, unless resendUnknown, the user's explicit choice, makes it
//     pending again for this attempt.
func (db *DB) BeginEffect(ctx context.Context, r Receipt, resendUnknown bool) (*Receipt, error) {
	if r.Key == "" || r.RunID == "" {
		return nil, errors.New("begin effect: key and run id are required")
	}
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("begin effect %s: %w", r.Key, err)
	}
	defer tx.Rollback()
	now := db.now()
	existing, err := addIntent(ctx, tx, r, now)
	if err != nil {
		return nil, fmt.Errorf("begin effect %s: %w", r.Key, err)
	}
	var out *Receipt
	switch {
	case existing == nil:
	case existing.State == event.StatusDone:
		out = existing
	case resendUnknown:
		if _, err := tx.ExecContext(ctx, `
			UPDATE receipts SET state = 'pending', run_id = ?, phase_id = ?, attempt = ?, acked = ?,
				args_json = COALESCE(?, args_json), updated_at = ? WHERE key = ?`,
			r.RunID, r.PhaseID, r.Attempt, r.Acked, rawOrNull(r.Args), formatTime(now), r.Key); err != nil {
			return nil, fmt.Errorf("begin effect %s: %w", r.Key, err)
		}
	default:
		if err := markReceiptUnknown(ctx, tx, r.Key, now); err != nil {
			return nil, fmt.Errorf("begin effect %s: %w", r.Key, err)
		}
		if err := tx.Commit(); err != nil {
			return nil, fmt.Errorf("begin effect %s: %w", r.Key, err)
		}
		return nil, ErrOutcomeUnknown
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("begin effect %s: %w", r.Key, err)
	}
	return out, nil
}

// AckEffect records that the go-ahead for a pending intent is about to be
// sent to the process that acts on it. From then on the effect may have
// happened.
func (db *DB) AckEffect(ctx context.Context, key string) error {
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("ack effect %s: %w", key, err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `UPDATE receipts SET acked = 1, updated_at = ? WHERE key = ? AND state = 'pending'`,
		formatTime(db.now()), key)
	if err == nil {
		err = oneRow(res)
	}
	if err != nil {
		return fmt.Errorf("ack effect %s: %w", key, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("ack effect %s: %w", key, err)
	}
	return nil
}

// MarkPendingUnknown settles the pending intents of a run (of one phase,
// if phaseID is not ""), once no process can still be carrying them out.
// An intent whose go-ahead may have gone out becomes unknown: whether it
// happened is not known. One that was never acked cannot have happened
// and is forgotten, so a later attempt may make it. It returns how many
// became unknown.
func (db *DB) MarkPendingUnknown(ctx context.Context, runID, phaseID string) (int, error) {
	// Almost always there is nothing pending: check without taking the
	// write lock, which would cost a harness phase a commit.
	var pending int
	if err := db.ro.QueryRowContext(ctx, `
		SELECT COUNT(*) FROM receipts WHERE run_id = ? AND state = 'pending' AND (? = '' OR phase_id = ?)`,
		runID, phaseID, phaseID).Scan(&pending); err != nil {
		return 0, fmt.Errorf("pending intents of run %s: %w", runID, err)
	}
	if pending == 0 {
		return 0, nil
	}
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("settle pending intents of run %s: %w", runID, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `
		DELETE FROM receipts WHERE run_id = ? AND state = 'pending' AND acked = 0 AND (? = '' OR phase_id = ?)`,
		runID, phaseID, phaseID); err != nil {
		return 0, fmt.Errorf("forget unacked intents of run %s: %w", runID, err)
	}
	res, err := tx.ExecContext(ctx, `
		UPDATE receipts SET state = 'unknown', updated_at = ?
		WHERE run_id = ? AND state = 'pending' AND (? = '' OR phase_id = ?)`,
		formatTime(db.now()), runID, phaseID, phaseID)
	if err != nil {
		return 0, fmt.Errorf("mark pending intents of run %s unknown: %w", runID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, err
	}
	return int(n), tx.Commit()
}

// forgetIntent projects effect.failed: the effect certainly did not
// happen, so its pending intent is removed and may be tried again.
func forgetIntent(ctx context.Context, tx *txn, key string) error {
	_, err := tx.ExecContext(ctx, `DELETE FROM receipts WHERE key = ? AND state = 'pending'`, key)
	return err
}
