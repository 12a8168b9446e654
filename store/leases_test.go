package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"agent/event"
)

func TestAcquireLease(t *testing.T) {
	t.Parallel()
	const (
		holder = "host/1111/aaaa"
		other  = "host/2222/bbbb"
		ttl    = 30 * time.Second
	)
	tests := []struct {
		name     string
		holder   string        // lease owner at creation; "" for none
		advance  time.Duration // clock moves this much before acquiring
		dead     bool          // the holder is provably dead
		acquirer string
		wantHeld bool
	}{
		{name: "free", holder: "", acquirer: other},
		{name: "already ours", holder: holder, acquirer: holder},
		{name: "held by a live owner", holder: holder, acquirer: other, wantHeld: true},
		{name: "held until exactly now", holder: holder, advance: ttl, acquirer: other, wantHeld: true},
		{name: "expired", holder: holder, advance: ttl + time.Microsecond, acquirer: other},
		{name: "dead holder", holder: holder, dead: true, acquirer: other},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := openTest(t)
			clock := newClock()
			db.Now = clock.Now
			db.OwnerDead = func(owner string) bool { return tt.dead && owner == holder }
			if err := db.CreateRun(ctx, &Run{ID: "run-1"}, tt.holder, ttl); err != nil {
				t.Fatal(err)
			}
			clock.Advance(tt.advance)

			err := db.AcquireLease(ctx, "run-1", tt.acquirer, ttl)
			if !tt.wantHeld {
				if err != nil {
					t.Fatalf("AcquireLease: %v", err)
				}
				r, err := db.GetRun(ctx, "run-1")
				if err != nil {
					t.Fatal(err)
				}
				if r.LeaseOwner != tt.acquirer || !r.LeaseExpiresAt.Equal(clock.Now().Add(ttl)) {
					t.Errorf("lease = %s until %v, want %s until %v", r.LeaseOwner, r.LeaseExpiresAt, tt.acquirer, clock.Now().Add(ttl))
				}
				return
			}
			var held *LeaseHeldError
			if !errors.As(err, &held) || !errors.Is(err, ErrLeaseHeld) {
				t.Fatalf("AcquireLease err = %v, want *LeaseHeldError", err)
			}
			if held.RunID != "run-1" || held.Owner != holder || !held.ExpiresAt.Equal(newClock().Now().Add(ttl)) {
				t.Errorf("LeaseHeldError = %+v", held)
			}
			if !strings.Contains(err.Error(), "run run-1 is busy: lease held by "+holder+" until ") {
				t.Errorf("error %q does not name the holder", err)
			}
		})
	}
}

func TestLeaseTakeover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	clock := newClock()
	db.Now = clock.Now
	const a, b, c = "host/1/aaaa", "host/2/bbbb", "host/3/cccc"
	ttl := 10 * time.Second
	if err := db.CreateRun(ctx, &Run{ID: "run-1"}, a, ttl); err != nil {
		t.Fatal(err)
	}

	clock.Advance(5 * time.Second)
	if err := db.RenewLease(ctx, "run-1", a, ttl); err != nil {
		t.Fatalf("renew a live lease: %v", err)
	}
	if err := db.RenewLease(ctx, "run-1", b, ttl); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("renew by a non-holder: err = %v, want ErrLeaseLost", err)
	}

	// a stalls past expiry; b takes over; a must learn it lost the lease.
	clock.Advance(ttl + time.Second)
	if err := db.AcquireLease(ctx, "run-1", b, ttl); err != nil {
		t.Fatalf("take over expired lease: %v", err)
	}
	if err := db.RenewLease(ctx, "run-1", a, ttl); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("renew after takeover: err = %v, want ErrLeaseLost", err)
	}

	// Releasing a lease we lost is a no-op; the real holder's release frees it.
	if err := db.ReleaseLease(ctx, "run-1", a); err != nil {
		t.Fatal(err)
	}
	if err := db.AcquireLease(ctx, "run-1", c, ttl); !errors.Is(err, ErrLeaseHeld) {
		t.Errorf("acquire after stale release: err = %v, want ErrLeaseHeld", err)
	}
	if err := db.ReleaseLease(ctx, "run-1", b); err != nil {
		t.Fatal(err)
	}
	if err := db.AcquireLease(ctx, "run-1", c, ttl); err != nil {
		t.Errorf("acquire after release: %v", err)
	}

	// An expired lease cannot be renewed even when nobody took it.
	clock.Advance(ttl + time.Second)
	if err := db.RenewLease(ctx, "run-1", c, ttl); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("renew expired lease: err = %v, want ErrLeaseLost", err)
	}

	if err := db.AcquireLease(ctx, "missing", a, ttl); !errors.Is(err, ErrNotFound) {
		t.Errorf("acquire on a missing run: err = %v, want ErrNotFound", err)
	}
}

func TestOwnerDead(t *testing.T) {
	t.Parallel()
	host, err := os.Hostname()
	if err != nil {
		t.Skip("no hostname:", err)
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip("cannot run true:", err)
	}
	exited := cmd.Process.Pid

	tests := []struct {
		owner string
		dead  bool
	}{
		{owner: NewLeaseOwner(), dead: false}, // this process
		{owner: fmt.Sprintf("%s/%d/abcd", host, exited), dead: true},
		{owner: fmt.Sprintf("other-%s/%d/abcd", host, exited), dead: false}, // cannot check another host
		{owner: "garbage", dead: false},
		{owner: host + "/notapid/abcd", dead: false},
	}
	for _, tt := range tests {
		if got := ownerDead(tt.owner); got != tt.dead {
			t.Errorf("ownerDead(%q) = %v, want %v", tt.owner, got, tt.dead)
		}
	}
}

func TestNewLeaseOwner(t *testing.T) {
	t.Parallel()
	a, b := NewLeaseOwner(), NewLeaseOwner()
	if a == b {
		t.Errorf("two owners are equal: %s", a)
	}
	host, pid, ok := parseOwner(a)
	if want, _ := os.Hostname(); !ok || host != want || pid != os.Getpid() {
		t.Errorf("parseOwner(%q) = %q, %d, %v", a, host, pid, ok)
	}
}

func TestReclaimableRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	clock := newClock()
	db.Now = clock.Now
	db.OwnerDead = func(owner string) bool { return strings.HasPrefix(owner, "dead/") }
	const ttl = time.Minute

	for _, r := range []struct{ id, owner string }{
		{"run-expired", "host/1/aaaa"},
		{"run-live", "host/2/bbbb"},
		{"run-dead", "dead/3/cccc"},
		{"run-finished", "host/4/dddd"},
		{"run-unleased", ""},
	} {
		if err := db.CreateRun(ctx, &Run{ID: r.id}, r.owner, ttl); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.SetRunStatus(ctx, "run-finished", event.StatusCompleted); err != nil {
		t.Fatal(err)
	}
	ids := func() []string {
		t.Helper()
		runs, err := db.ReclaimableRuns(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range runs {
			ids = append(ids, r.ID)
		}
		return ids
	}

	// Before expiry only the dead holder's run can be taken.
	if got := ids(); !reflect.DeepEqual(got, []string{"run-dead"}) {
		t.Errorf("ReclaimableRuns = %v, want [run-dead]", got)
	}
	// At expiry a lease still holds (RenewLease accepts expires_at >= now).
	clock.Advance(ttl)
	if got := ids(); !reflect.DeepEqual(got, []string{"run-dead"}) {
		t.Errorf("ReclaimableRuns at expiry = %v, want [run-dead]", got)
	}
	if err := db.RenewLease(ctx, "run-live", "host/2/bbbb", ttl); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	if got := ids(); !reflect.DeepEqual(got, []string{"run-expired", "run-dead"}) {
		t.Errorf("ReclaimableRuns after expiry = %v, want [run-expired run-dead]", got)
	}

	for want := 1; want <= 2; want++ {
		if n, err := db.NoteReclaim(ctx, "run-expired"); err != nil || n != want {
			t.Errorf("NoteReclaim = %d, %v; want %d", n, err, want)
		}
	}
	if r, err := db.GetRun(ctx, "run-expired"); err != nil || r.Reclaims != 2 {
		t.Errorf("GetRun reclaims = %+v, %v; want 2", r, err)
	}
	if _, err := db.NoteReclaim(ctx, "missing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("NoteReclaim of a missing run: err = %v, want ErrNotFound", err)
	}
}
