package gateway_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"agent/event"
	"agent/gateway"
	"agent/gateway/gatewaytest"
	"agent/store"
)

// syncBuffer is a bytes.Buffer a logger and the test can share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRetentionPrunesAtStart: a gateway with RetentionDays prunes, as it
// starts, the runs that finished longer ago, and logs what it freed; a
// client replaying the session still gets every seq, each pruned delta as
// a placeholder.
func TestRetentionPrunesAtStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, err := store.Open(filepath.Join(dir, "agent.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}

	// A gateway keeping a day prunes nothing that finished just now.
	var logs syncBuffer
	keepADay := func(now func() time.Time) func(*gateway.Config) {
		return func(cfg *gateway.Config) {
			cfg.RetentionDays = 1
			cfg.Now = now
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		}
	}
	first := newEnvOn(t, db, ws, keepADay(time.Now))
	c := first.dial()
	sid := first.session(c)
	first.attach(c, sid, 0)
	run := first.start(c, sid, "echo hello world")
	before := waitTerminal(t, c, run.RunID)
	checkSeqs(t, before, 0)
	c.Close()
	stopCtx, cancel := gatewaytest.Timeout(20 * time.Second)
	defer cancel()
	if err := first.srv.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "runs=0") {
		t.Errorf("the first gateway did not log an empty prune at start:\n%s", logs.String())
	}
	if r, err := db.GetRun(context.Background(), run.RunID); err != nil || !r.PrunedAt.IsZero() {
		t.Fatalf("a run finished now was pruned: %+v, %v", r, err)
	}

	// Three days later it is pruned as the gateway starts.
	second := newEnvOn(t, db, ws, keepADay(func() time.Time { return time.Now().Add(72 * time.Hour) }))
	deadline := time.Now().Add(gatewaytest.Patience)
	for {
		r, err := db.GetRun(context.Background(), run.RunID)
		if err != nil {
			t.Fatal(err)
		}
		if !r.PrunedAt.IsZero() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run was not pruned at start; log:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	for deadline := time.Now().Add(gatewaytest.Patience); !strings.Contains(logs.String(), "runs=1 deltas=2"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no log of what was pruned:\n%s", logs.String())
		}
	}
	if evs, _ := db.ListEvents(context.Background(), run.RunID, 0, 0); len(evs) != len(before)-2 {
		t.Errorf("the run has %d events, want %d: its 2 deltas deleted", len(evs), len(before)-2)
	}

	c2 := second.dial()
	second.attach(c2, sid, 0)
	replay := waitTerminal(t, c2, run.RunID)
	checkSeqs(t, replay, 0)
	if len(replay) != len(before) {
		t.Fatalf("replayed %d events, want %d", len(replay), len(before))
	}
	for i, ev := range replay {
		if ev.Event != before[i].Event {
			t.Errorf("replayed event %d is %s, was %s", ev.Seq, ev.Event, before[i].Event)
		}
		if ev.Event == event.MessageDelta && string(ev.Data) != `{"text":"","pruned":true}` {
			t.Errorf("replayed delta %d: %s", ev.Seq, ev.Data)
		}
	}
}

func TestRetentionDaysChecked(t *testing.T) {
	t.Parallel()
	db, err := store.Open(filepath.Join(t.TempDir(), "agent.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = gateway.New(gateway.Config{Token: testToken, DB: db, DefaultWorkspace: t.TempDir(), RetentionDays: -1})
	if err == nil || !strings.Contains(err.Error(), "retention days must be 0 (off) or more") {
		t.Errorf("RetentionDays -1: %v", err)
	}
}
