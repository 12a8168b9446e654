package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A lease on a run is (lease_owner, lease_expires_at, lease_heartbeat_at)
// on its runs row. Only the holder may write the run; it renews the lease
// while it works, and anyone may take a lease that has expired or whose
// holder is provably dead.

// ErrLeaseHeld matches any *LeaseHeldError with errors.Is.
var ErrLeaseHeld = errors.New("lease held")

// ErrLeaseLost is returned by RenewLease when the lease expired or was
// taken over: the caller must stop writing to the run.
var ErrLeaseLost = errors.New("lease lost")

// LeaseHeldError says a live process holds a run's lease.
type LeaseHeldError struct {
	RunID     string
	Owner     string
	ExpiresAt time.Time
}

func (e *LeaseHeldError) Error() string {
	return fmt.Sprintf("run %s is busy: lease held by %s until %s",
		e.RunID, e.Owner, e.ExpiresAt.Local().Format("15:04:05"))
}

// Is makes errors.Is(err, ErrLeaseHeld) true for a *LeaseHeldError.
func (e *LeaseHeldError) Is(target error) bool { return target == ErrLeaseHeld }

// NewLeaseOwner returns a lease owner name for this process,
// "hostname/pid/nonce"; the nonce tells apart two holders in one process.
func NewLeaseOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	var nonce [4]byte
	rand.Read(nonce[:])
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(nonce[:]))
}

// AcquireLease takes the run's lease for owner until now+ttl. It succeeds
// if the lease is free, expired, already owner's, or held by a dead
// process; otherwise it returns a *LeaseHeldError.
func (db *DB) AcquireLease(ctx context.Context, runID, owner string, ttl time.Duration) error {
	if owner == "" {
		return fmt.Errorf("acquire lease on run %s: empty owner", runID)
	}
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("acquire lease on run %s: %w", runID, err)
	}
	defer tx.Rollback()
	if err := db.acquireLease(ctx, tx, runID, owner, ttl); err != nil {
		var held *LeaseHeldError
		if errors.As(err, &held) {
			return err // already names the run
		}
		return fmt.Errorf("acquire lease on run %s: %w", runID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("acquire lease on run %s: %w", runID, err)
	}
	return nil
}

// RenewLease extends owner's lease to now+ttl. It returns ErrLeaseLost if
// owner no longer holds an unexpired lease.
func (db *DB) RenewLease(ctx context.Context, runID, owner string, ttl time.Duration) error {
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("renew lease on run %s: %w", runID, err)
	}
	defer tx.Rollback()
	if err := db.renewLease(ctx, tx, runID, owner, ttl); err != nil {
		return fmt.Errorf("renew lease on run %s: %w", runID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("renew lease on run %s: %w", runID, err)
	}
	return nil
}

// ReleaseLease gives up owner's lease. Releasing a lease owner no longer
// holds is not an error: there is nothing left to give up.
func (db *DB) ReleaseLease(ctx context.Context, runID, owner string) error {
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("release lease on run %s: %w", runID, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `
		UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL, lease_heartbeat_at = NULL
		WHERE id = ? AND lease_owner = ?`, runID, owner); err != nil {
		return fmt.Errorf("release lease on run %s: %w", runID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("release lease on run %s: %w", runID, err)
	}
	return nil
}

// ReclaimableRuns returns the runs a dead process left behind: status
// running, and a lease that expired or whose holder is provably dead
// (OwnerDead), oldest first. A running run without a lease is not
// returned: nobody took it, so nobody died holding it. The caller takes
// each over with AcquireLease, which checks again.
func (db *DB) ReclaimableRuns(ctx context.Context) ([]Run, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("reclaimable runs: %w", err)
	}
	defer tx.Rollback()
	// "status = 'running'" is spelled as in the partial index runs_running.
	runs, err := queryRuns(ctx, tx, `SELECT `+runColumns+` FROM runs
		WHERE status = 'running' AND lease_owner IS NOT NULL ORDER BY created_at, rowid`)
	if err != nil {
		return nil, fmt.Errorf("reclaimable runs: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("reclaimable runs: %w", err)
	}
	now := db.now()
	var out []Run
	for _, r := range runs {
		if db.abandoned(r, now) {
			out = append(out, r)
		}
	}
	return out, nil
}

// Abandoned reports whether a leased run's holder is gone: its lease
// expired (expires_at < now, as in acquireLease) or its process is
// provably dead.
func (db *DB) Abandoned(r Run) bool { return db.abandoned(r, db.now()) }

func (db *DB) abandoned(r Run, now time.Time) bool {
	return r.LeaseExpiresAt.Before(now) || db.OwnerDead(r.LeaseOwner)
}

// NoteReclaim counts one more takeover of the run and returns the count.
func (db *DB) NoteReclaim(ctx context.Context, runID string) (int, error) {
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("note reclaim of run %s: %w", runID, err)
	}
	defer tx.Rollback()
	n, err := noteReclaim(ctx, tx, runID, db.now())
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("note reclaim of run %s: %w", runID, ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("note reclaim of run %s: %w", runID, err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("note reclaim of run %s: %w", runID, err)
	}
	return n, nil
}

// noteReclaim counts one more takeover of the run and returns the count.
func noteReclaim(ctx context.Context, tx *txn, runID string, now time.Time) (int, error) {
	var n int
	err := tx.QueryRowContext(ctx, `
		UPDATE runs SET reclaims = reclaims + 1, updated_at = ? WHERE id = ? RETURNING reclaims`,
		formatTime(now), runID).Scan(&n)
	return n, err
}

func (db *DB) acquireLease(ctx context.Context, tx *txn, runID, owner string, ttl time.Duration) error {
	var holder string
	var expires time.Time
	err := tx.QueryRowContext(ctx,
		`SELECT COALESCE(lease_owner, ''), lease_expires_at FROM runs WHERE id = ?`, runID,
	).Scan(&holder, timeValue{&expires})
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	now := db.now()
	// Expired means expires_at < now, the complement of RenewLease's test.
	free := holder == "" || holder == owner || expires.Before(now) || db.OwnerDead(holder)
	if !free {
		return &LeaseHeldError{RunID: runID, Owner: holder, ExpiresAt: expires}
	}
	_, err = tx.ExecContext(ctx, `
		UPDATE runs SET lease_owner = ?, lease_expires_at = ?, lease_heartbeat_at = ?
		WHERE id = ?`, owner, formatTime(now.Add(ttl)), formatTime(now), runID)
	return err
}

func (db *DB) renewLease(ctx context.Context, tx *txn, runID, owner string, ttl time.Duration) error {
	now := db.now()
	res, err := tx.ExecContext(ctx, `
		UPDATE runs SET lease_expires_at = ?, lease_heartbeat_at = ?
		WHERE id = ? AND lease_owner = ? AND lease_expires_at >= ?`,
		formatTime(now.Add(ttl)), formatTime(now), runID, owner, formatTime(now))
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrLeaseLost
	}
	return nil
}

// ownerDead reports whether owner ("host/pid/nonce") is a process on this
// machine that no longer exists, so a user resuming after kill -9 need not
// wait for the lease to expire. Anything it cannot prove is alive.
func ownerDead(owner string) bool {
	host, pid, ok := parseOwner(owner)
	if !ok {
		return false
	}
	if h, err := os.Hostname(); err != nil || h != host {
		return false
	}
	// Signal 0 checks existence; EPERM means it exists but is not ours.
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// OwnerProcess names the process behind a lease owner made by
// NewLeaseOwner: its host and pid; ok is false for any other name.
func OwnerProcess(owner string) (host string, pid int, ok bool) { return parseOwner(owner) }

// parseOwner splits "host/pid/nonce"; the host may itself contain '/'.
func parseOwner(owner string) (host string, pid int, ok bool) {
	rest, _, found := cutLast(owner, "/")
	if !found {
		return "", 0, false
	}
	host, pidText, found := cutLast(rest, "/")
	if !found || host == "" {
		return "", 0, false
	}
	pid, err := strconv.Atoi(pidText)
	if err != nil || pid <= 0 {
		return "", 0, false
	}
	return host, pid, true
}

func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}
