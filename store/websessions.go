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

// A web session is a page signed in to the gateway (the web view): its
// cookie is a random id; the store keeps the id's SHA-256 and its expiry.

// webSessionKey is what the store keeps of a session's cookie.
func webSessionKey(cookie string) string {
	sum := sha256.Sum256([]byte(cookie))
	return hex.EncodeToString(sum[:])
}

// CreateWebSession records a signed-in page until expires, and forgets
// the sessions that have expired.
func (db *DB) CreateWebSession(ctx context.Context, cookie string, expires time.Time) error {
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("create web session: %w", err)
	}
	defer tx.Rollback()
	now := db.now()
	if _, err := tx.ExecContext(ctx, `DELETE FROM web_sessions WHERE expires_at <= ?`, formatTime(now)); err != nil {
		return fmt.Errorf("create web session: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO web_sessions (id_hash, expires_at, created_at) VALUES (?, ?, ?)`,
		webSessionKey(cookie), formatTime(expires), formatTime(now)); err != nil {
		return fmt.Errorf("create web session: %w", err)
	}
	return tx.Commit()
}

// WebSessionExpiry returns when the session of cookie ends, or
// ErrNotFound if it has ended (expired or signed out) or never was.
func (db *DB) WebSessionExpiry(ctx context.Context, cookie string) (time.Time, error) {
	var expires time.Time
	err := db.ro.QueryRowContext(ctx, `SELECT expires_at FROM web_sessions WHERE id_hash = ? AND expires_at > ?`,
		webSessionKey(cookie), formatTime(db.now())).Scan(timeValue{&expires})
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, ErrNotFound
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("web session: %w", err)
	}
	return expires, nil
}

// RevokeWebSession ends the session of cookie (signing out).
func (db *DB) RevokeWebSession(ctx context.Context, cookie string) error {
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("end web session: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM web_sessions WHERE id_hash = ?`, webSessionKey(cookie)); err != nil {
		return fmt.Errorf("end web session: %w", err)
	}
	return tx.Commit()
}
