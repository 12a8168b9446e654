package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"agent/event"
	"agent/gateway/api"
	"agent/gateway/gatewaytest"
	"agent/store"
)

func ev(seq int64, typ string) *item {
	return newItem(event.Event{V: 1, Seq: seq, Type: typ, RunID: "r", SessionID: "s", TS: time.Unix(0, 0)})
}

func TestHubOverflow(t *testing.T) {
	t.Parallel()
	h := newHub(2, 0)
	slow, _ := h.subscribe()
	fast, _ := h.subscribe()
	read := make(chan int64) // each seq the fast one reads, as it reads it
	go func() {
		var batch []*item
		for open := true; open; {
			<-fast.wake
			batch, open = fast.take(batch)
			for _, it := range batch {
				read <- it.ev.Seq
			}
		}
		close(read)
	}()
	var fastSeqs []int64
	for i := int64(1); i <= 3; i++ {
		h.publish(ev(i, event.ToolStarted))
		fastSeqs = append(fastSeqs, <-read) // the fast one keeps up: it read i before i+1 comes
	}
	// The slow subscriber got what fitted, then was dropped, not blocked on.
	items, open := slow.take(nil)
	if open || !slow.overflowed || fmt.Sprint(seqsOf(items)) != "[1 2]" {
		t.Errorf("slow subscriber: open %v, overflowed %v, got %v", open, slow.overflowed, seqsOf(items))
	}
	if h.size() != 1 {
		t.Errorf("%d subscribers left, want 1", h.size())
	}
	h.unsubscribe(fast)
	h.unsubscribe(fast) // twice is fine
	if _, more := <-read; more || fmt.Sprint(fastSeqs) != "[1 2 3]" || fast.overflowed {
		t.Errorf("fast subscriber got %v, then more: %v", fastSeqs, more)
	}
}

// A subscriber that joins mid-reply gets the deltas the journal has not
// written yet, since it finds them neither in the store nor live.
func TestHubPendingDeltas(t *testing.T) {
	t.Parallel()
	h := newHub(1, 4)
	h.publish(ev(5, event.MessageCompleted))
	h.publish(ev(6, event.MessageDelta))
	h.publish(ev(7, event.MessageDelta))
	sub, last := h.subscribe()
	<-sub.wake // woken for what it was seeded with
	if items, _ := sub.take(nil); last != 7 || fmt.Sprint(seqsOf(items)) != "[6 7]" {
		t.Fatalf("last %d, seeded %v", last, seqsOf(items))
	}
	h.publish(ev(8, event.MessageCompleted)) // writes the deltas: no longer pending
	late, _ := h.subscribe()
	if items, _ := late.take(nil); len(items) != 0 {
		t.Errorf("a later subscriber got %d stale deltas", len(items))
	}
}

// An attached client that keeps up holds no buffer: the queue is given
// back after a burst, and a subscriber costs a few words.
func TestHubQueueGivenBack(t *testing.T) {
	t.Parallel()
	h := newHub(4096, 0)
	sub, _ := h.subscribe()
	for i := int64(1); i <= 1000; i++ {
		h.publish(ev(i, event.ToolStarted))
	}
	batch, open := sub.take(nil)
	if !open || len(batch) != 1000 {
		t.Fatalf("took %d, open %v", len(batch), open)
	}
	sub.take(batch) // the burst is sent: its storage goes back to the queue, or not
	if cap(sub.queue) > 256 {
		t.Errorf("the queue kept storage of %d after the burst", cap(sub.queue))
	}
}

func seqsOf(items []*item) []int64 {
	var seqs []int64
	for _, it := range items {
		seqs = append(seqs, it.ev.Seq)
	}
	return seqs
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	db, err := store.Open(t.TempDir() + "/agent.db")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ws := t.TempDir()
	ok := Config{Token: "unit-token-0123456789", DB: db, DefaultWorkspace: ws}
	tests := []struct {
		change func(*Config)
		want   string
	}{
		{func(c *Config) {}, ""},
		{func(c *Config) { c.Listen = "[::1]:0" }, ""},
		{func(c *Config) { c.Listen = "localhost:7420" }, ""},
		{func(c *Config) { c.Listen = "0.0.0.0:7420" }, "--allow-remote"},
		{func(c *Config) { c.Listen = ":7420" }, "--allow-remote"},
		{func(c *Config) { c.Listen = "0.0.0.0:7420"; c.AllowRemote = true }, ""},
		{func(c *Config) { c.Token = "" }, "token"},
		{func(c *Config) { c.DB = nil }, "store"},
		{func(c *Config) { c.ReclaimPolicy = "retry" }, "reclaim policy"},
		{func(c *Config) { c.MaxConcurrentRuns = -1 }, "max concurrent runs"},
		{func(c *Config) { c.DefaultWorkspace = "rel" }, "absolute"},
		{func(c *Config) { c.Listen = "nonsense" }, "listen address"},
		// A port that is no port is bad input (exit 2), refused before any listening.
		{func(c *Config) { c.Listen = "127.0.0.1:notaport" }, `port "notaport" is no port number`},
		{func(c *Config) { c.Listen = "127.0.0.1:65536" }, `port "65536" is no port number`},
		{func(c *Config) { c.Token = "fifteen-chars-x" }, "at least 16"},
		{func(c *Config) { c.MaxConnections = -1 }, "max connections"},
		{func(c *Config) { c.IdleTimeout = -1 }, "durations"},
		{func(c *Config) { c.WorkspaceRoots = []string{"rel"} }, "workspace root"},
		{func(c *Config) { c.WorkspaceRoots = []string{"/does/not/exist"} }, "workspace root"},
		{func(c *Config) { c.WorkspaceRoots = []string{"/"} }, ""},
	}
	for i, tt := range tests {
		c := ok
		tt.change(&c)
		_, err := New(c)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%d: %v", i, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%d: %v, want an error about %q", i, err, tt.want)
		}
	}
	s, _ := New(ok)
	if s.cfg.Listen != api.DefaultListen || s.cfg.MaxConcurrentRuns != 4 || s.cfg.RunTimeout != 30*time.Minute ||
		s.cfg.DrainGrace != 30*time.Second || s.cfg.LeaseTTL != 30*time.Second || s.cfg.ReclaimPolicy != ReclaimResume ||
		s.cfg.MaxConnections != 512 || s.cfg.ReadHeaderTimeout != 10*time.Second || s.cfg.ReadTimeout != 30*time.Second ||
		s.cfg.IdleTimeout != time.Minute || s.cfg.ConnectTimeout != 10*time.Second {
		t.Errorf("defaults: %+v", s.cfg)
	}
}

func TestToError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err       error
		code      string
		retryable bool
		status    int
	}{
		{errorf(api.CodeSessionLocked, "x"), api.CodeSessionLocked, false, 409},
		{fmt.Errorf("get: %w", store.ErrNotFound), api.CodeNotFound, false, 404},
		{fmt.Errorf("prefix: %w", store.ErrAmbiguous), api.CodeBadRequest, false, 400},
		{errDraining, api.CodeUnavailable, true, 503},
		{&store.LeaseHeldError{RunID: "r"}, api.CodeConflict, true, 409},
		{errors.New("disk on fire"), api.CodeInternal, false, 500},
		{errorf(api.CodeUnauthorized, "x"), api.CodeUnauthorized, false, 401},
	}
	for _, tt := range tests {
		e := toError(tt.err)
		if e.Code != tt.code || e.Retryable != tt.retryable || httpStatus(e.Code) != tt.status {
			t.Errorf("%v: %+v (HTTP %d)", tt.err, e, httpStatus(e.Code))
		}
	}
}

func TestOrigin(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		origin string
		ok     bool
	}{
		{"", true},
		{"http://127.0.0.1:7420", true},
		{"http://127.0.0.1:7421", false},
		// A port or host that only extends or shortens the gateway's.
		{"http://127.0.0.1:74201", false},
		{"http://127.0.0.1:742", false},
		{"http://127.0.0.1", false},
		{"http://127.0.0.1:7420.evil.example", false},
		{"http://127.0.0.10:7420", false},
		{"https://evil.example", false},
		{"null", false},
	} {
		r := httptest.NewRequest("GET", "http://127.0.0.1:7420/ws", nil)
		if tt.origin != "" {
			r.Header.Set("Origin", tt.origin)
		}
		if got := originAllowed(r); got != tt.ok {
			t.Errorf("Origin %q: %v", tt.origin, got)
		}
	}
	r := httptest.NewRequest("GET", "/v1/sessions?access_token=x", nil)
	if !tokenInQuery(r.URL) {
		t.Error("access_token in the query not seen")
	}
	r.Header.Set("Authorization", "Basic abc")
	if tok, present := bearer(r); !present || tok != "" {
		t.Errorf("Basic auth: %q %v", tok, present)
	}
	_ = http.StatusOK
}

// The queue runs runs first come first served, at most max at once and
// one per session, without a busy session holding up the others.
func TestQueueOrder(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var started []string
	release := make(chan struct{})
	q := newQueue(2, func(ctx context.Context, r *run) {
		mu.Lock()
		started = append(started, r.id)
		mu.Unlock()
		<-release
	})
	for _, r := range []*run{{id: "a1", sessionID: "a"}, {id: "a2", sessionID: "a"}, {id: "b1", sessionID: "b"}, {id: "c1", sessionID: "c"}} {
		if _, err := q.add(r); err != nil {
			t.Fatal(err)
		}
	}
	waitLen := func(n int) {
		t.Helper()
		deadline := time.Now().Add(gatewaytest.Patience)
		for {
			mu.Lock()
			l := len(started)
			mu.Unlock()
			if l >= n || time.Now().After(deadline) {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitLen(2)
	mu.Lock()
	slices.Sort(started) // they start on their own goroutines
	if fmt.Sprint(started) != "[a1 b1]" {
		t.Errorf("first started %v, want a1 b1 (a2 waits for a1)", started)
	}
	mu.Unlock()
	if _, running, ok := q.get("a2"); !ok || running {
		t.Errorf("a2 should be waiting")
	}
	if waiting, found := q.stop("c1", errCancelled); !found || waiting == nil {
		t.Errorf("stopping a waiting run: %v %v", waiting, found)
	} else {
		q.forget(waiting)
	}
	close(release)
	waitLen(3)
	if err := q.drain(context.Background(), time.Second, errDrained); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(started[2:]) != "[a2]" {
		t.Errorf("started %v", started)
	}
	if left := q.close(); len(left) != 0 {
		t.Errorf("left %v", left)
	}
	if _, err := q.add(&run{id: "d", sessionID: "d"}); !errors.Is(err, errDraining) {
		t.Errorf("add after close: %v", err)
	}
}

// The replay and the live stream overlap at their boundary: an event
// persisted after the client joined the live stream, but before the replay
// read the store, is in both. The client gets it once, in order; a delta
// not yet in the store comes from the live stream alone.
func TestReplayThenLiveSendsTheBoundaryOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := store.Open(t.TempDir() + "/agent.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.CreateSession(ctx, &store.Session{ID: "s1"}); err != nil {
		t.Fatal(err)
	}
	if err := db.CreateRun(ctx, &store.Run{ID: "r1", SessionID: "s1"}, "", 0); err != nil {
		t.Fatal(err)
	}
	sess, _, err := newSessions(db, 64, newMetrics()).open(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	appendType := func(typ string) {
		t.Helper()
		e := event.New(typ, event.WarningData{Message: typ})
		e.RunID = "r1"
		if _, err := sess.append(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		appendType(event.Warning) // seqs 1-3: in the store only
	}
	for _, after := range []int64{0, 2} {
		sub, _ := sess.hub.subscribe() // the client joins the live stream
		if after == 0 {
			for range 3 {
				appendType(event.Warning) // seqs 4-6: in the store and the live stream
			}
			appendType(event.MessageDelta) // seq 7: in the live stream only, for now
		}
		sess.hub.unsubscribe(sub) // ends the live stream after what it holds
		var got []int64
		send := func(frame []byte) error {
			var f api.EventFrame
			if err := json.Unmarshal(frame, &f); err != nil {
				return err
			}
			got = append(got, f.Seq)
			return nil
		}
		a := &attachment{sub: sub, done: make(chan struct{}), sent: after}
		if err := replay(ctx, db, "s1", a, send); err != nil {
			t.Fatalf("after %d: %v", after, err)
		}
		if err := a.drain(send); !errors.Is(err, errStreamEnded) {
			t.Fatalf("after %d: %v", after, err)
		}
		// The second client, joining later, gets delta 7 from the hub's
		// pending deltas: it is still not in the store.
		want := []int64{1, 2, 3, 4, 5, 6, 7}[after:]
		if !slices.Equal(got, want) {
			t.Errorf("after seq %d the client got %v, want %v", after, got, want)
		}
	}
}

// A subscriber read on demand without a sender has a reader only while
// something is queued: one starts at the first event, returns once the
// queue is empty, and the next event, or the subscriber's removal, starts
// another.
func TestHubReaderOnDemand(t *testing.T) {
	t.Parallel()
	h := newHub(2, 0)
	sub, _ := h.subscribe()
	h.publish(ev(1, event.ToolStarted)) // queued before any reader may run
	starts := make(chan struct{}, 8)
	if !sub.onDemand(func() { starts <- struct{}{} }, nil, nil) {
		t.Fatal("something is queued, yet the caller need not read")
	}
	starts <- struct{}{} // the caller reads
	read := func() (seqs []int64, open bool) {
		t.Helper()
		select {
		case <-starts:
		default:
			t.Fatal("no reader was started")
		}
		for {
			items, open, stop := sub.takeOrStop(nil)
			if stop {
				return seqs, true
			}
			seqs = append(seqs, seqsOf(items)...)
			if !open {
				return seqs, false
			}
		}
	}
	if seqs, open := read(); fmt.Sprint(seqs) != "[1]" || !open {
		t.Fatalf("first reader got %v, open %v", seqs, open)
	}
	if len(starts) != 0 {
		t.Fatal("a reader started while none was needed")
	}
	h.publish(ev(2, event.ToolStarted))
	h.publish(ev(3, event.ToolStarted)) // the reader of 2 is running: no second one
	if seqs, _ := read(); fmt.Sprint(seqs) != "[2 3]" || len(starts) != 0 {
		t.Fatalf("second reader got %v; %d more started", seqs, len(starts))
	}
	h.unsubscribe(sub)
	if seqs, open := read(); len(seqs) != 0 || open {
		t.Fatalf("after removal the reader got %v, open %v", seqs, open)
	}
}

// With a sender, the hub's fan-out writes what is published and no
// reader runs; a client whose socket is full gets a reader, which takes
// what the socket did not, in order, and the sender is not called while
// it runs; removal brings a reader to end the stream.
func TestHubFanOut(t *testing.T) {
	t.Parallel()
	h := newHub(8, 0)
	sub, _ := h.subscribe()
	var full atomic.Bool
	written := make(chan int64, 16)
	starts := make(chan struct{}, 8)
	send := func(items []*item, _ *frameBatch) ([]*item, bool) {
		for i, it := range items {
			if full.Load() {
				return items[i:], true
			}
			written <- it.ev.Seq
		}
		return nil, false
	}
	if sub.onDemand(func() { starts <- struct{}{} }, send, nil) {
		t.Fatal("nothing is queued, yet the caller must read")
	}
	next := func(what string) {
		t.Helper()
		select {
		case <-starts:
		case <-time.After(time.Minute):
			t.Fatalf("no reader started %s", what)
		}
	}
	wrote := func(want ...int64) {
		t.Helper()
		for _, w := range want {
			select {
			case got := <-written:
				if got != w {
					t.Fatalf("the fan-out wrote %d, want %d", got, w)
				}
			case <-time.After(time.Minute):
				t.Fatalf("the fan-out did not write %d", w)
			}
		}
	}
	h.publish(ev(1, event.ToolStarted))
	h.publish(ev(2, event.ToolStarted))
	wrote(1, 2)

	full.Store(true)
	h.publish(ev(3, event.ToolStarted))
	next("for a full socket")
	h.publish(ev(4, event.ToolStarted)) // the reader has it
	items, open, stop := sub.takeOrStop(nil)
	if fmt.Sprint(seqsOf(items)) != "[3 4]" || !open || stop {
		t.Fatalf("the reader took %v (open %v, stop %v), want [3 4]", seqsOf(items), open, stop)
	}
	if _, _, stop := sub.takeOrStop(nil); !stop {
		t.Fatal("the reader was not told to stop with nothing queued")
	}

	full.Store(false)
	h.publish(ev(5, event.ToolStarted))
	wrote(5)
	h.unsubscribe(sub)
	next("at removal")
	if items, open, _ := sub.takeOrStop(nil); len(items) != 0 || open {
		t.Fatalf("after removal the reader got %v, open %v", seqsOf(items), open)
	}
	if len(starts) != 0 || len(written) != 0 {
		t.Errorf("%d readers more started, %d events more written", len(starts), len(written))
	}
}

// keepalive closes a connection whose frames make no progress for
// writeTimeout, and only that one.
func TestStalledWrites(t *testing.T) {
	t.Parallel()
	start := time.Now()
	var c conn
	if c.stalled(start) {
		t.Fatal("an idle connection is stalled")
	}
	c.writesBegun.Add(1) // a frame on its way
	if c.stalled(start) || c.stalled(start.Add(writeTimeout-time.Second)) {
		t.Fatal("stalled before writeTimeout")
	}
	c.writesDone.Add(1)
	c.writesBegun.Add(1) // written, and the next one on its way: progress
	if c.stalled(start.Add(writeTimeout + time.Second)) {
		t.Fatal("stalled although a frame was written")
	}
	stuck := start.Add(writeTimeout + 2*time.Second) // the first look that sees no progress
	if c.stalled(stuck) || c.stalled(stuck.Add(writeTimeout-time.Second)) {
		t.Fatal("stalled before writeTimeout without progress")
	}
	if !c.stalled(stuck.Add(writeTimeout)) {
		t.Fatal("not stalled after writeTimeout without progress")
	}
}

// Memory is given back once many clients have left and none is leaving
// any more, and again at the next look; not while they leave, and not for
// a few; clients that came and went between two looks count.
func TestMemoryGivenBackWhenClientsLeave(t *testing.T) {
	t.Parallel()
	var m memoryWatch
	var got []bool
	// How many connections have ended in all, at each tick.
	for _, gone := range []int{0, 0, 50, 400, 1000, 1000, 1000, 1000, 1050, 1050, 1050, 2050, 2050, 2050, 2050} {
		got = append(got, m.left(gone))
	}
	want := "[false false false false false true true false false false false false true true false]"
	if fmt.Sprint(got) != want {
		t.Errorf("gave back at %v, want %v", got, want)
	}
}
