package store

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"agent/event"
	"agent/llm"
)

// createSession inserts a session with this id.
func createSession(t *testing.T, db *DB, id string) *Session {
	t.Helper()
	s := &Session{ID: id, Title: "title of " + id}
	if err := db.CreateSession(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	return s
}

// createSessionRun inserts a run with no lease in a session.
func createSessionRun(t *testing.T, db *DB, sessionID, runID string) *Run {
	t.Helper()
	r := &Run{ID: runID, SessionID: sessionID, Prompt: "do it"}
	if err := db.CreateRun(context.Background(), r, "", 0); err != nil {
		t.Fatal(err)
	}
	return r
}

// sessionAppend writes events of one run through a session journal.
func sessionAppend(t *testing.T, j *Journal, runID string, evs ...event.Event) []event.Event {
	t.Helper()
	out := make([]event.Event, 0, len(evs))
	for _, e := range evs {
		e.RunID = runID
		stored, err := j.Append(context.Background(), e)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, stored)
	}
	return out
}

func sessionJournal(t *testing.T, db *DB, sessionID string) *Journal {
	t.Helper()
	j, err := db.SessionJournal(context.Background(), sessionID)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func TestSessionCRUD(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	clock := newClock()
	db.Now = clock.Now

	a := &Session{ID: "abcd1111-a", Title: "first"}
	if err := db.CreateSession(ctx, a); err != nil {
		t.Fatal(err)
	}
	if !a.CreatedAt.Equal(clock.Now()) || !a.UpdatedAt.Equal(clock.Now()) {
		t.Errorf("CreateSession set times %v %v", a.CreatedAt, a.UpdatedAt)
	}
	clock.Advance(time.Second)
	createSession(t, db, "abcd2222-b")
	clock.Advance(time.Second)
	createSession(t, db, "ffff0000-c")

	if err := db.CreateSession(ctx, &Session{ID: a.ID}); err == nil {
		t.Error("CreateSession with a duplicate id succeeded")
	}
	if err := db.CreateSession(ctx, &Session{}); err == nil {
		t.Error("CreateSession with an empty id succeeded")
	}
	if err := db.CreateSession(ctx, &Session{ID: "x", ParentID: "missing"}); err == nil {
		t.Error("CreateSession with a missing parent succeeded")
	}

	got, err := db.GetSession(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, a) {
		t.Errorf("GetSession = %+v, want %+v", got, a)
	}

	tests := []struct {
		id      string
		want    string
		wantErr error
	}{
		{id: "abcd1", want: "abcd1111-a"},
		{id: "ffff", want: "ffff0000-c"},
		{id: "abcd", wantErr: ErrAmbiguous},
		{id: "abc", wantErr: ErrAmbiguous},
		{id: "f", want: "ffff0000-c"}, // any unique prefix, however short
		{id: "zzzz", wantErr: ErrNotFound},
		{id: "z", wantErr: ErrNotFound},
	}
	for _, tt := range tests {
		s, err := db.GetSession(ctx, tt.id)
		if tt.wantErr != nil {
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("GetSession(%q) err = %v, want %v", tt.id, err, tt.wantErr)
			}
			continue
		}
		if err != nil || s.ID != tt.want {
			t.Errorf("GetSession(%q) = %v, %v; want %s", tt.id, s, err, tt.want)
		}
	}

	// An event in the oldest session moves it to the front; LastSeq and
	// Runs count what the session holds.
	createSessionRun(t, db, a.ID, "run-1")
	createSessionRun(t, db, a.ID, "run-2")
	clock.Advance(time.Second)
	sessionAppend(t, sessionJournal(t, db, a.ID), "run-1", event.New(event.RunStarted, nil), event.New(event.Heartbeat, nil))

	ss, err := db.ListSessions(ctx, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range ss {
		ids = append(ids, s.ID)
	}
	if want := []string{"abcd1111-a", "ffff0000-c", "abcd2222-b"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("ListSessions = %v, want %v", ids, want)
	}
	if s := ss[0]; s.LastSeq != 2 || s.Runs != 2 || !s.UpdatedAt.Equal(clock.Now()) || !s.CreatedAt.Equal(a.CreatedAt) {
		t.Errorf("session after events = %+v, want last seq 2, 2 runs, updated now", s)
	}
	if s := ss[1]; s.LastSeq != 0 || s.Runs != 0 {
		t.Errorf("empty session = %+v", s)
	}
	if ss, err := db.ListSessions(ctx, 1, false); err != nil || len(ss) != 1 || ss[0].ID != a.ID {
		t.Errorf("ListSessions(1) = %+v, %v", ss, err)
	}

	runs, err := db.ListSessionRuns(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 || runs[0].ID != "run-1" || runs[1].ID != "run-2" {
		t.Errorf("ListSessionRuns = %+v, want run-1, run-2", runs)
	}
}

// Two runs of one session write through one journal at once: the session
// gets one gapless sequence, each run a strictly increasing part of it,
// and a reader can resume after any seq.
func TestSessionJournalConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createSession(t, db, "sess-1")
	runIDs := []string{"run-a", "run-b"}
	for _, id := range runIDs {
		createSessionRun(t, db, "sess-1", id)
	}
	j := sessionJournal(t, db, "sess-1")

	const each = 40
	var wg sync.WaitGroup
	for _, runID := range runIDs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				typ := event.Heartbeat
				if i%4 == 1 {
					typ = event.MessageDelta // buffered, written with the next event
				}
				e := event.New(typ, nil)
				e.RunID = runID
				if _, err := j.Append(ctx, e); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := j.Close(ctx); err != nil {
		t.Fatal(err)
	}

	const total = 2 * each
	evs, err := db.ListSessionEvents(ctx, "sess-1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != total {
		t.Fatalf("session has %d events, want %d", len(evs), total)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) || e.SessionID != "sess-1" {
			t.Fatalf("event %d = seq %d session %q, want seq %d", i, e.Seq, e.SessionID, i+1)
		}
	}
	for _, runID := range runIDs {
		own, err := db.ListEvents(ctx, runID, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(own) != each {
			t.Errorf("%s has %d events, want %d", runID, len(own), each)
		}
		for i := 1; i < len(own); i++ {
			if own[i].Seq <= own[i-1].Seq {
				t.Errorf("%s seqs not increasing: %d then %d", runID, own[i-1].Seq, own[i].Seq)
			}
		}
	}

	tests := []struct {
		after int64
		limit int
		want  []event.Event
	}{
		{after: 0, want: evs},
		{after: 1, want: evs[1:]},
		{after: 37, want: evs[37:]},
		{after: total - 1, want: evs[total-1:]},
		{after: total, want: nil},
		{after: 10, limit: 5, want: evs[10:15]},
	}
	for _, tt := range tests {
		tail, err := db.ListSessionEvents(ctx, "sess-1", tt.after, tt.limit)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(tail, tt.want) {
			t.Errorf("ListSessionEvents(after %d, limit %d) = %d events from seq %v, want %d",
				tt.after, tt.limit, len(tail), firstSeq(tail), len(tt.want))
		}
	}

	// A new journal (a restarted gateway) continues the sequence.
	e := sessionAppend(t, sessionJournal(t, db, "sess-1"), "run-b", event.New(event.Heartbeat, nil))[0]
	if e.Seq != total+1 {
		t.Errorf("new journal's first seq = %d, want %d", e.Seq, total+1)
	}
}

func firstSeq(evs []event.Event) any {
	if len(evs) == 0 {
		return "none"
	}
	return evs[0].Seq
}

func TestSessionJournalRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createSession(t, db, "sess-1")
	createSession(t, db, "sess-2")
	createSessionRun(t, db, "sess-1", "run-1")
	createSessionRun(t, db, "sess-2", "run-other")
	createRun(t, db, "run-alone")

	if _, err := db.SessionJournal(ctx, "missing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("SessionJournal of a missing session: err = %v, want ErrNotFound", err)
	}
	j := sessionJournal(t, db, "sess-1")

	bad := []struct {
		name string
		e    event.Event
	}{
		{"no run", event.New(event.Heartbeat, nil)},
		{"another session", event.Event{RunID: "run-1", SessionID: "sess-2", Type: event.Heartbeat}},
		{"run of another session", event.Event{RunID: "run-other", Type: event.Heartbeat}},
		{"run without a session", event.Event{RunID: "run-alone", Type: event.Heartbeat}},
		{"missing run", event.Event{RunID: "run-missing", Type: event.Heartbeat}},
	}
	for _, tt := range bad {
		if _, err := j.Append(ctx, tt.e); err == nil {
			t.Errorf("session journal accepted an event with %s", tt.name)
		}
	}
	// Refusals spend no seq.
	e := sessionAppend(t, j, "run-1", event.New(event.Heartbeat, nil))[0]
	if e.Seq != 1 || e.SessionID != "sess-1" || e.RunID != "run-1" {
		t.Errorf("first accepted event = seq %d session %q run %q", e.Seq, e.SessionID, e.RunID)
	}
}

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createSession(t, db, "sess-1")
	createSession(t, db, "sess-2")

	r := &Run{ID: "run-1", SessionID: "sess-1", IdempotencyKey: "k1"}
	if err := db.CreateRun(ctx, r, "", 0); err != nil {
		t.Fatal(err)
	}
	err := db.CreateRun(ctx, &Run{ID: "run-2", SessionID: "sess-1", IdempotencyKey: "k1"}, "", 0)
	if !errors.Is(err, ErrDuplicateKey) {
		t.Errorf("second run with key k1: err = %v, want ErrDuplicateKey", err)
	}
	if _, err := db.GetRun(ctx, "run-2"); !errors.Is(err, ErrNotFound) {
		t.Errorf("refused run was stored: %v", err)
	}
	// The same key in another session, and runs without a key, are fine.
	for _, r := range []*Run{
		{ID: "run-3", SessionID: "sess-2", IdempotencyKey: "k1"},
		{ID: "run-4", SessionID: "sess-1"},
		{ID: "run-5", SessionID: "sess-1"},
	} {
		if err := db.CreateRun(ctx, r, "", 0); err != nil {
			t.Errorf("create %s: %v", r.ID, err)
		}
	}
	// The index holds even for a writer that skips CreateRun's check.
	if _, err := db.rw.ExecContext(context.Background(), `INSERT INTO runs (id, kind, session_id, status, idempotency_key, created_at, updated_at)
		VALUES ('run-raw', 'run', 'sess-1', 'running', 'k1', '', '')`); err == nil {
		t.Error("unique index let a duplicate key in")
	}

	tests := []struct {
		session, key string
		want         string
	}{
		{"sess-1", "k1", "run-1"},
		{"sess-2", "k1", "run-3"},
		{"sess-1", "k2", ""},
		{"sess-1", "", ""},
		{"sess-3", "k1", ""},
	}
	for _, tt := range tests {
		got, err := db.RunByIdempotencyKey(ctx, tt.session, tt.key)
		if tt.want == "" {
			if !errors.Is(err, ErrNotFound) {
				t.Errorf("RunByIdempotencyKey(%s, %q) = %v, %v; want ErrNotFound", tt.session, tt.key, got, err)
			}
			continue
		}
		if err != nil || got.ID != tt.want || got.IdempotencyKey != tt.key {
			t.Errorf("RunByIdempotencyKey(%s, %q) = %+v, %v; want %s", tt.session, tt.key, got, err, tt.want)
		}
	}
	if got, err := db.GetRun(ctx, "run-1"); err != nil || got.IdempotencyKey != "k1" || got.Reclaims != 0 {
		t.Errorf("GetRun = %+v, %v; want key k1", got, err)
	}
}

func TestSessionPrior(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createSession(t, db, "sess-1")
	for _, id := range []string{"run-1", "run-2", "run-3"} {
		createSessionRun(t, db, "sess-1", id)
	}
	harness := &Run{ID: "run-h", Kind: KindHarness, SessionID: "sess-1"}
	if err := db.CreateRun(ctx, harness, "", 0); err != nil {
		t.Fatal(err)
	}
	createSessionRun(t, db, "sess-1", "run-4")
	j := sessionJournal(t, db, "sess-1")

	// run-1 loops: only its last iteration is its conversation.
	sessionAppend(t, j, "run-1",
		event.New(event.IterationStarted, event.IterationData{Iteration: 1, MaxIterations: 2}),
		userMsg("first try", 1),
		assistantMsg("meh", 1),
		event.New(event.IterationStarted, event.IterationData{Iteration: 2, MaxIterations: 2}),
		userMsg("hi", 2),
		assistantMsg("hello", 2),
		event.New(event.RunCompleted, event.RunFinishedData{Status: "completed"}),
	)
	// run-2 was interrupted with c2 unanswered.
	sessionAppend(t, j, "run-2",
		userMsg("read both", 0),
		assistantMsg("reading", 0,
			event.ToolCall{ID: "c1", Name: "read_file", Arguments: `{"path":"a"}`},
			event.ToolCall{ID: "c2", Name: "read_file", Arguments: `{"path":"b"}`}),
		toolStarted("c1", "read_file", `{"path":"a"}`),
		toolStarted("c2", "read_file", `{"path":"b"}`),
		toolCompleted(event.ToolCompletedData{CallID: "c1", OK: true, Output: "A"}),
		event.New(event.RunInterrupted, event.RunFinishedData{Status: "interrupted"}),
	)
	// run-3's only call never ran, and its message had no text.
	sessionAppend(t, j, "run-3",
		userMsg("write", 0),
		assistantMsg("", 0, event.ToolCall{ID: "c9", Name: "write_file", Arguments: `{}`}),
	)
	// A harness run's messages are its children's: not a conversation.
	sessionAppend(t, j, "run-h", userMsg("phase prompt", 0), assistantMsg("phase answer", 0))
	sessionAppend(t, j, "run-4", userMsg("and now?", 0))

	run1 := []llm.Message{
		{Role: llm.RoleUser, Content: "hi"},
		{Role: llm.RoleAssistant, Content: "hello"},
	}
	run2 := []llm.Message{
		{Role: llm.RoleUser, Content: "read both"},
		{Role: llm.RoleAssistant, Content: "reading", ToolCalls: []llm.ToolCall{
			{ID: "c1", Name: "read_file", Arguments: `{"path":"a"}`}}},
		{Role: llm.RoleTool, Content: "A", ToolCallID: "c1"},
	}
	run3 := []llm.Message{{Role: llm.RoleUser, Content: "write"}}
	run4 := []llm.Message{{Role: llm.RoleUser, Content: "and now?"}}
	cat := func(parts ...[]llm.Message) []llm.Message {
		var out []llm.Message
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}

	tests := []struct {
		before string
		want   []llm.Message
	}{
		{"run-1", nil},
		{"run-2", run1},
		{"run-3", cat(run1, run2)},
		{"run-h", cat(run1, run2, run3)},
		{"run-4", cat(run1, run2, run3)},
		{"", cat(run1, run2, run3, run4)},
	}
	for _, tt := range tests {
		got, err := db.SessionPrior(ctx, "sess-1", tt.before)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 && len(tt.want) == 0 {
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("SessionPrior(before %q) =\n%+v\nwant\n%+v", tt.before, got, tt.want)
		}
	}

	if _, err := db.SessionPrior(ctx, "sess-1", "run-elsewhere"); !errors.Is(err, ErrNotFound) {
		t.Errorf("SessionPrior before a run not in the session: err = %v, want ErrNotFound", err)
	}
	if _, err := db.SessionPrior(ctx, "missing", ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("SessionPrior of a missing session: err = %v, want ErrNotFound", err)
	}
}

func TestSanitizeConversation(t *testing.T) {
	t.Parallel()
	user := llm.Message{Role: llm.RoleUser, Content: "u"}
	call := func(ids ...string) []llm.ToolCall {
		var cs []llm.ToolCall
		for _, id := range ids {
			cs = append(cs, llm.ToolCall{ID: id, Name: "t"})
		}
		return cs
	}
	asst := func(text string, ids ...string) llm.Message {
		return llm.Message{Role: llm.RoleAssistant, Content: text, ToolCalls: call(ids...)}
	}
	result := func(id string) llm.Message {
		return llm.Message{Role: llm.RoleTool, Content: "r" + id, ToolCallID: id}
	}

	tests := []struct {
		name string
		in   []llm.Message
		want []llm.Message
	}{
		{"complete", []llm.Message{user, asst("x", "1"), result("1"), asst("done")},
			[]llm.Message{user, asst("x", "1"), result("1"), asst("done")}},
		{"partly answered", []llm.Message{user, asst("x", "1", "2"), result("2")},
			[]llm.Message{user, asst("x", "2"), result("2")}},
		{"unanswered with text", []llm.Message{user, asst("x", "1")},
			[]llm.Message{user, asst("x")}},
		{"unanswered without text", []llm.Message{user, asst("", "1"), user},
			[]llm.Message{user, user}},
		// A result after another message does not answer the call: the
		// provider wants it right after.
		{"answered too late", []llm.Message{asst("", "1"), user, result("1")},
			[]llm.Message{user}},
		{"orphan and duplicate results", []llm.Message{result("0"), asst("", "1"), result("1"), result("1"), result("3")},
			[]llm.Message{asst("", "1"), result("1")}},
	}
	for _, tt := range tests {
		got := sanitizeConversation(tt.in)
		for i := range got { // compare calls by content, not nil-ness
			if len(got[i].ToolCalls) == 0 {
				got[i].ToolCalls = nil
			}
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tt.name, got, tt.want)
		}
	}
}

// A database last opened by a binary that knew migrations 0001 and 0002
// gets sessions' columns and indexes on the next Open and keeps its data.
func TestMigrateSessionsFromVersion2(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	old, path := oldDatabase(t, "0003_sessions.sql")
	rw := old.rw.db
	const ts = "2026-11-22T08:00:00.000000Z"
	for _, q := range []string{
		`INSERT INTO sessions (id, title, created_at, updated_at) VALUES ('sess-old', 'old', '` + ts + `', '` + ts + `')`,
		`INSERT INTO runs (id, kind, session_id, status, lease_owner, lease_expires_at, created_at, updated_at)
			VALUES ('run-old', 'run', 'sess-old', 'running', 'host/1/dead', '` + ts + `', '` + ts + `', '` + ts + `')`,
		`INSERT INTO events (run_id, session_id, seq, ts, type) VALUES ('run-old', 'sess-old', 1, '` + ts + `', 'run.started')`,
		`INSERT INTO events (run_id, session_id, seq, ts, type) VALUES ('run-old', 'sess-old', 2, '` + ts + `', 'heartbeat')`,
	} {
		if _, err := rw.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	if got := schemaVersion(t, old); got != 2 {
		t.Fatalf("user_version = %d, want 2", got)
	}
	rw.Close()

	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Later migrations (0004…) may have been applied too.
	if got, want := schemaVersion(t, db), migrationCount(t); got < 3 || got != want {
		t.Errorf("user_version = %d, want %d (≥ 3)", got, want)
	}
	r, err := db.GetRun(ctx, "run-old")
	if err != nil {
		t.Fatalf("run lost by the migration: %v", err)
	}
	if r.SessionID != "sess-old" || r.IdempotencyKey != "" || r.Reclaims != 0 || r.LeaseOwner != "host/1/dead" {
		t.Errorf("migrated run = %+v", r)
	}
	s, err := db.GetSession(ctx, "sess-old")
	if err != nil || s.LastSeq != 2 || s.Runs != 1 || s.Title != "old" {
		t.Errorf("migrated session = %+v, %v; want last seq 2, 1 run", s, err)
	}
	e := sessionAppend(t, sessionJournal(t, db, "sess-old"), "run-old", event.New(event.Heartbeat, nil))[0]
	if e.Seq != 3 {
		t.Errorf("journal after migration starts at seq %d, want 3", e.Seq)
	}
	if _, err := db.rw.ExecContext(context.Background(), `INSERT INTO events (run_id, session_id, seq, ts, type)
		VALUES ('run-old', 'sess-old', 3, '`+ts+`', 'heartbeat')`); err == nil {
		t.Error("events accepted a second seq 3 in a session")
	}
	if n, err := db.NoteReclaim(ctx, "run-old"); err != nil || n != 1 {
		t.Errorf("NoteReclaim on a migrated run = %d, %v", n, err)
	}
}

// BenchmarkSessionJournalAppend measures one durable event through a
// session journal, which also touches the session row.
func BenchmarkSessionJournalAppend(b *testing.B) {
	ctx := context.Background()
	db, err := Open(b.TempDir() + "/agent.db")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	if err := db.CreateSession(ctx, &Session{ID: "sess-1"}); err != nil {
		b.Fatal(err)
	}
	if err := db.CreateRun(ctx, &Run{ID: "run-1", SessionID: "sess-1"}, "", 0); err != nil {
		b.Fatal(err)
	}
	j, err := db.SessionJournal(ctx, "sess-1")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := j.Append(ctx, event.Event{RunID: "run-1", Type: event.Heartbeat}); err != nil {
			b.Fatal(err)
		}
	}
}

// A database whose job sessions were made before sessions named their job
// gets them marked on the next Open, so the default list leaves them out.
func TestMigrateMarksOldJobSessions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const at = `'2026-11-22T08:00:00.000000Z'`
	db := migratedFrom(t, "0009_job_sessions.sql",
		`INSERT INTO scheduled_jobs (id, name, cron_expr, timezone, prompt_template, created_at, updated_at, next_run_at)
			VALUES ('job-1', 'standup', '@daily', 'UTC', 'p', `+at+`, `+at+`, `+at+`)`,
		`INSERT INTO job_runs (id, job_id, run_id, scheduled_for, status) VALUES ('jr-1', 'job-1', 'tick-run', `+at+`, 'completed')`,
		`INSERT INTO sessions (id, title, created_at, updated_at) VALUES ('tick', 'job standup · 2026-11-22 08:00:00 UTC', `+at+`, `+at+`)`,
		`INSERT INTO runs (id, kind, session_id, status, prompt, idempotency_key, created_at, updated_at)
			VALUES ('tick-run', 'run', 'tick', 'completed', 'p', 'job-run:jr-1', `+at+`, `+at+`)`,
		// A deleted job's tick session: its job_runs row went with it.
		`INSERT INTO sessions (id, title, created_at, updated_at) VALUES ('orphan', 'job gone · 2026-11-22 08:00:00 UTC', `+at+`, `+at+`)`,
		`INSERT INTO runs (id, kind, session_id, status, prompt, idempotency_key, created_at, updated_at)
			VALUES ('orphan-run', 'run', 'orphan', 'completed', 'p', 'job-run:jr-gone', `+at+`, `+at+`)`,
		// A person's session whose title only looks like a job's.
		`INSERT INTO sessions (id, title, created_at, updated_at) VALUES ('mine', 'job search · notes', `+at+`, `+at+`)`,
	)
	listed := func(withJobs bool) []string {
		ss, err := db.ListSessions(ctx, 0, withJobs)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, s := range ss {
			ids = append(ids, s.ID)
		}
		slices.Sort(ids)
		return ids
	}
	if got := listed(false); !slices.Equal(got, []string{"mine"}) {
		t.Errorf("ListSessions after the migration = %v, want only the person's", got)
	}
	if got := listed(true); !slices.Equal(got, []string{"mine", "orphan", "tick"}) {
		t.Errorf("ListSessions with jobs = %v", got)
	}
	if s, err := db.GetSession(ctx, "tick"); err != nil || s.JobID != "job-1" {
		t.Errorf("old tick session = %+v, %v; want job-1", s, err)
	}
}
