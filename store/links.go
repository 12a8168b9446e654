package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// One-decision links (docs/SCHEMA.md#wait_links): a link's random token
// decides one wait, once, until the wait's deadline. The store keeps the
// token's SHA-256 only, as it does a web session's cookie.

// WaitLink is what a one-decision link may decide, and whether it still may.
type WaitLink struct {
	RunID     string
	WaitID    string
	ExpiresAt time.Time
	UsedAt    time.Time // zero while unused
}

// A link that can decide nothing more: used already, or past its wait's
// deadline.
var (
	ErrLinkUsed    = errors.New("this link was used already: a link decides once")
	ErrLinkExpired = errors.New("this link has expired: the wait's deadline has passed")
)

func linkKey(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// CreateWaitLink records a link with token for wait waitID of run runID,
// good until expires.
func (db *DB) CreateWaitLink(ctx context.Context, token, runID, waitID string, expires time.Time) error {
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("create link for wait %s: %w", waitID, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO wait_links (token_hash, run_id, wait_id, expires_at, created_at) VALUES (?, ?, ?, ?, ?)`,
		linkKey(token), runID, waitID, formatTime(expires), formatTime(db.now())); err != nil {
		return fmt.Errorf("create link for wait %s: %w", waitID, err)
	}
	return tx.Commit()
}

// LinkedWait returns the link of token and its wait: ErrNotFound for a
// token no link has, ErrLinkUsed or ErrLinkExpired (with the link and
// wait) for one that can decide nothing more.
func (db *DB) LinkedWait(ctx context.Context, token string) (WaitLink, Wait, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return WaitLink{}, Wait{}, fmt.Errorf("link: %w", err)
	}
	defer tx.Rollback()
	l, w, err := linkedWait(ctx, tx, token, db.now())
	if err != nil {
		return l, w, err
	}
	return l, w, tx.Commit()
}

// UseWaitLink spends the link of token, once: it returns its wait for
// the caller to decide. A second use is ErrLinkUsed, whoever makes it.
func (db *DB) UseWaitLink(ctx context.Context, token string) (WaitLink, Wait, error) {
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return WaitLink{}, Wait{}, fmt.Errorf("use link: %w", err)
	}
	defer tx.Rollback()
	now := db.now()
	l, w, err := linkedWait(ctx, tx, token, now)
	if err != nil {
		return l, w, err
	}
	res, err := tx.ExecContext(ctx, `UPDATE wait_links SET used_at = ? WHERE token_hash = ? AND used_at IS NULL`,
		formatTime(now), linkKey(token))
	if err == nil {
		err = oneRow(res)
	}
	if errors.Is(err, ErrNotFound) {
		return l, w, ErrLinkUsed
	}
	if err != nil {
		return l, w, fmt.Errorf("use link: %w", err)
	}
	l.UsedAt = now
	return l, w, tx.Commit()
}

func linkedWait(ctx context.Context, tx *txn, token string, now time.Time) (WaitLink, Wait, error) {
	var l WaitLink
	err := tx.QueryRowContext(ctx, `SELECT run_id, wait_id, expires_at, used_at FROM wait_links WHERE token_hash = ?`,
		linkKey(token)).Scan(&l.RunID, &l.WaitID, timeValue{&l.ExpiresAt}, timeValue{&l.UsedAt})
	if errors.Is(err, sql.ErrNoRows) {
		return l, Wait{}, ErrNotFound
	}
	if err != nil {
		return l, Wait{}, fmt.Errorf("link: %w", err)
	}
	ws, err := scanWaits(tx.QueryContext(ctx, waitSelect+` WHERE w.run_id = ? AND w.wait_id = ?`, l.RunID, l.WaitID))
	if err != nil {
		return l, Wait{}, fmt.Errorf("link: %w", err)
	}
	if len(ws) == 0 {
		return l, Wait{}, ErrNotFound
	}
	switch {
	case !l.UsedAt.IsZero():
		return l, ws[0], ErrLinkUsed
	case !now.Before(l.ExpiresAt):
		return l, ws[0], ErrLinkExpired
	}
	return l, ws[0], nil
}
