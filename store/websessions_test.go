package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A web session lasts until it expires or is revoked, and the store
// keeps no usable cookie.
func TestWebSessions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, clock := openClocked(t)
	if err := db.CreateWebSession(ctx, "cookie-a", clock.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := db.CreateWebSession(ctx, "cookie-b", clock.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	got, err := db.WebSessionExpiry(ctx, "cookie-a")
	if err != nil || !got.Equal(clock.Add(time.Hour).Truncate(time.Microsecond)) {
		t.Fatalf("expiry of a = %v, %v; want in an hour", got, err)
	}
	var stored int
	if err := db.ro.QueryRowContext(ctx, `SELECT COUNT(*) FROM web_sessions WHERE id_hash LIKE '%cookie%'`).Scan(&stored); err != nil || stored != 0 {
		t.Errorf("%d rows hold a cookie as it is (%v)", stored, err)
	}
	if _, err := db.WebSessionExpiry(ctx, "cookie-c"); !errors.Is(err, ErrNotFound) {
		t.Errorf("an unknown cookie: %v, want ErrNotFound", err)
	}
	if err := db.RevokeWebSession(ctx, "cookie-b"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.WebSessionExpiry(ctx, "cookie-b"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a revoked session: %v, want ErrNotFound", err)
	}
	*clock = clock.Add(time.Hour)
	if _, err := db.WebSessionExpiry(ctx, "cookie-a"); !errors.Is(err, ErrNotFound) {
		t.Errorf("an expired session: %v, want ErrNotFound", err)
	}
}
