package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"agent/event"
)

const twoPhaseMission = `{"version":1,"objective":"Produce a market report","phases":[
	{"id":"gather","title":"Gather sources","instructions":"find three","depends_on":[],
	 "evidence":{"type":"artifact","artifacts":["sources.md"]}},
	{"id":"write","title":"Write report","depends_on":["gather"],
	 "evidence":{"type":"receipt","receipts":["email_sent"]},"max_attempts":2}]}`

// planEvent is a plan.created event for a mission.
func planEvent(mission string) event.Event {
	return event.New(event.PlanCreated, event.PlanData{Plan: json.RawMessage(mission)})
}

// phaseEvent is an event of one attempt of a phase.
func phaseEvent(typ, phaseID string, attempt int, data any) event.Event {
	e := event.New(typ, data)
	e.PhaseID, e.Attempt = phaseID, attempt
	return e
}

// compactJSON is s as it is stored: event.New compacts the plan.
func compactJSON(t *testing.T, s string) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(s)); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// phaseSpec returns the raw object of phase i of a mission, as stored.
func phaseSpec(t *testing.T, mission string, i int) json.RawMessage {
	t.Helper()
	var m struct{ Phases []json.RawMessage }
	if err := json.Unmarshal([]byte(compactJSON(t, mission)), &m); err != nil {
		t.Fatal(err)
	}
	return m.Phases[i]
}

// A harness run from plan to completion, with one retry, then read back
// the way `agent runs show` would.
func TestPlanLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	clock := newClock()
	db.Now = clock.Now
	createRun(t, db, "run-1")

	usage := &event.Usage{PromptTokens: 100, CompletionTokens: 20}
	failedFindings := event.VerificationData{
		VerificationID: "v1", TaskID: "gather", EvidenceType: "artifact",
		EvidenceRefs: []string{"sources.md"}, Status: "fail",
		Notes: []string{"sources.md is empty", "no URLs found"}, Path: "verification/gather-1.json",
	}
	passedFindings := failedFindings
	passedFindings.VerificationID, passedFindings.Status, passedFindings.Notes = "v2", "pass", nil
	passedFindings.Path = "verification/gather-2.json"

	evs := []event.Event{
		planEvent(twoPhaseMission),
		phaseEvent(event.PhaseStarted, "gather", 1, event.PhaseData{Title: "Gather sources"}),
		phaseEvent(event.ArtifactCreated, "gather", 1, event.ArtifactData{Path: "sources.md", SHA256: "e3b0", Bytes: 0}),
		phaseEvent(event.LearningRecorded, "gather", 1, event.LearningData{Text: "the API paginates at 50"}),
		phaseEvent(event.ApproachFailed, "gather", 1, event.ApproachData{Approach: "scrape the homepage", Why: "it is rendered by JS"}),
		phaseEvent(event.VerificationCompleted, "gather", 1, failedFindings),
		phaseEvent(event.PhaseFailed, "gather", 1, event.PhaseData{
			Status: "failed", Reason: "verification failed", Reasons: []string{"sources.md is empty"},
			WillRetry: true, DurationMS: 1500, Usage: usage,
		}),
		phaseEvent(event.PhaseStarted, "gather", 2, event.PhaseData{Title: "Gather sources"}),
		phaseEvent(event.ArtifactCreated, "gather", 2, event.ArtifactData{Path: "sources.md", SHA256: "9f86", Bytes: 120}),
		phaseEvent(event.VerificationCompleted, "gather", 2, passedFindings),
		phaseEvent(event.PhaseCompleted, "gather", 2, event.PhaseData{Output: "found 3 sources", DurationMS: 900, Usage: usage}),
		phaseEvent(event.PhaseStarted, "write", 1, nil),
		phaseEvent(event.ReceiptRecorded, "write", 1, event.ReceiptData{Type: "email_sent", Key: "k-email", Details: json.RawMessage(`{"message_id":"m1"}`)}),
		phaseEvent(event.PhaseCompleted, "write", 1, event.PhaseData{Output: "report sent"}),
	}
	base := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	ts := func(i int) time.Time { return base.Add(time.Duration(i) * time.Second) }
	for i := range evs {
		evs[i].TS = ts(i)
	}
	// One event per transaction, as the Journal writes them; check the
	// phase between attempts on the way.
	for i, e := range evs {
		appendSeq(t, db, "run-1", e)
		if i == 6 {
			ps, err := db.PlanState(ctx, "run-1")
			if err != nil {
				t.Fatal(err)
			}
			if g := ps.Phases[0]; g.Status != event.StatusPending || g.Attempts != 1 {
				t.Errorf("after a failed attempt that will retry: gather %s attempts %d, want pending 1", g.Status, g.Attempts)
			}
		}
	}

	ps, err := db.PlanState(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if ps.RunID != "run-1" || ps.Objective != "Produce a market report" || string(ps.Mission) != compactJSON(t, twoPhaseMission) ||
		!ps.CreatedAt.Equal(ts(0)) || !ps.UpdatedAt.Equal(clock.Now()) || !ps.Started() {
		t.Errorf("plan = %+v", ps)
	}
	wantPhases := []Phase{
		{
			RunID: "run-1", ID: "gather", Index: 0, Title: "Gather sources", Status: event.StatusCompleted,
			Attempts: 2, MaxAttempts: 3, Spec: phaseSpec(t, twoPhaseMission, 0), Output: "found 3 sources",
			StartedAt: ts(1), CompletedAt: ts(10), UpdatedAt: clock.Now(),
		},
		{
			RunID: "run-1", ID: "write", Index: 1, Title: "Write report", Status: event.StatusCompleted,
			Attempts: 1, MaxAttempts: 2, DependsOn: []string{"gather"}, Spec: phaseSpec(t, twoPhaseMission, 1),
			Output: "report sent", StartedAt: ts(11), CompletedAt: ts(13), UpdatedAt: clock.Now(),
		},
	}
	if !reflect.DeepEqual(ps.Phases, wantPhases) {
		t.Errorf("phases =\n%+v\nwant\n%+v", ps.Phases, wantPhases)
	}

	attempts, err := db.Attempts(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	wantAttempts := []Attempt{
		{
			RunID: "run-1", PhaseID: "gather", Attempt: 1, Status: event.StatusFailed, Reason: "verification failed",
			Reasons: []string{"sources.md is empty"}, Usage: *usage, DurationMS: 1500, StartedAt: ts(1), FinishedAt: ts(6),
		},
		{
			RunID: "run-1", PhaseID: "gather", Attempt: 2, Status: event.StatusPassed, Output: "found 3 sources",
			Usage: *usage, DurationMS: 900, StartedAt: ts(7), FinishedAt: ts(10),
		},
		{
			RunID: "run-1", PhaseID: "write", Attempt: 1, Status: event.StatusPassed, Output: "report sent",
			StartedAt: ts(11), FinishedAt: ts(13),
		},
	}
	if !reflect.DeepEqual(attempts, wantAttempts) {
		t.Errorf("attempts =\n%+v\nwant\n%+v", attempts, wantAttempts)
	}

	wantArtifacts := []Artifact{
		{RunID: "run-1", PhaseID: "gather", Attempt: 1, Path: "sources.md", SHA256: "e3b0", CreatedAt: ts(2)},
		{RunID: "run-1", PhaseID: "gather", Attempt: 2, Path: "sources.md", SHA256: "9f86", Bytes: 120, CreatedAt: ts(8)},
	}
	for _, tt := range []struct {
		phaseID string
		want    []Artifact
	}{{"", wantArtifacts}, {"gather", wantArtifacts}, {"write", nil}} {
		got, err := db.Artifacts(ctx, "run-1", tt.phaseID)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Artifacts(%q) =\n%+v\nwant\n%+v", tt.phaseID, got, tt.want)
		}
	}

	learnings, err := db.Learnings(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	wantLearnings := []Learning{{PhaseID: "gather", Attempt: 1, Text: "the API paginates at 50", CreatedAt: ts(3)}}
	if !reflect.DeepEqual(learnings, wantLearnings) {
		t.Errorf("learnings = %+v, want %+v", learnings, wantLearnings)
	}

	wantGuardrails := []Guardrail{
		{PhaseID: "gather", Attempt: 1, Kind: GuardrailFailedApproach, Text: "scrape the homepage — it is rendered by JS", CreatedAt: ts(4)},
		{PhaseID: "gather", Attempt: 1, Kind: GuardrailVerification, Text: "sources.md is empty; no URLs found", CreatedAt: ts(5)},
	}
	for _, tt := range []struct {
		phaseID string
		want    []Guardrail
	}{{"", wantGuardrails}, {"gather", wantGuardrails}, {"write", nil}} {
		got, err := db.Guardrails(ctx, "run-1", tt.phaseID)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Guardrails(%q) =\n%+v\nwant\n%+v", tt.phaseID, got, tt.want)
		}
	}

	verifications, err := db.Verifications(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	wantVerifications := []Verification{
		{PhaseID: "gather", Attempt: 1, Status: "fail", EvidenceType: "artifact", Findings: evs[5].Data, Path: "verification/gather-1.json", CreatedAt: ts(5)},
		{PhaseID: "gather", Attempt: 2, Status: "pass", EvidenceType: "artifact", Findings: evs[9].Data, Path: "verification/gather-2.json", CreatedAt: ts(9)},
	}
	if !reflect.DeepEqual(verifications, wantVerifications) {
		t.Errorf("verifications =\n%+v\nwant\n%+v", verifications, wantVerifications)
	}

	wantReceipt := Receipt{
		Key: "k-email", RunID: "run-1", PhaseID: "write", Attempt: 1, Type: "email_sent", State: event.StatusDone, Acked: true,
		Details: json.RawMessage(`{"message_id":"m1"}`), CreatedAt: ts(12), UpdatedAt: clock.Now(),
	}
	for _, phaseID := range []string{"", "write"} {
		got, err := db.Receipts(ctx, "run-1", phaseID)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, []Receipt{wantReceipt}) {
			t.Errorf("Receipts(%q) = %+v, want %+v", phaseID, got, wantReceipt)
		}
	}
	if got, err := db.Receipts(ctx, "run-1", "gather"); err != nil || len(got) != 0 {
		t.Errorf("Receipts(gather) = %+v, %v; want none", got, err)
	}
}

func TestPlanStateNotFound(t *testing.T) {
	t.Parallel()
	db := openTest(t)
	createRun(t, db, "run-1")
	if _, err := db.PlanState(context.Background(), "run-1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("PlanState of a run without a plan: err = %v, want ErrNotFound", err)
	}
}

func TestPlanCreatedReplaces(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const (
		planA = `{"objective":"A","phases":[{"id":"a1"},{"id":"a2","depends_on":["a1"]},{"id":"a3"}]}`
		planB = `{"objective":"B","phases":[{"id":"b1","max_attempts":5},{"id":"a1"}]}`
	)
	tests := []struct {
		name          string
		evs           []event.Event
		wantObjective string
		wantIDs       []string
		wantStarted   bool
	}{
		{
			name:          "replaced before any phase started",
			evs:           []event.Event{planEvent(planA), planEvent(planB)},
			wantObjective: "B",
			wantIDs:       []string{"b1", "a1"},
		},
		{
			name: "ignored after a phase started",
			evs: []event.Event{
				planEvent(planA),
				phaseEvent(event.PhaseStarted, "a2", 1, nil),
				planEvent(planB),
			},
			wantObjective: "A",
			wantIDs:       []string{"a1", "a2", "a3"},
			wantStarted:   true,
		},
		{
			name:          "duplicate phase ids skipped",
			evs:           []event.Event{planEvent(planA), planEvent(`{"objective":"dup","phases":[{"id":"x"},{"id":"x"}]}`)},
			wantObjective: "A",
			wantIDs:       []string{"a1", "a2", "a3"},
		},
		{
			name:          "phase without an id skipped",
			evs:           []event.Event{planEvent(planA), planEvent(`{"objective":"noid","phases":[{"title":"x"}]}`)},
			wantObjective: "A",
			wantIDs:       []string{"a1", "a2", "a3"},
		},
		{
			name:          "plan that is not an object skipped",
			evs:           []event.Event{planEvent(planA), planEvent(`[1,2]`)},
			wantObjective: "A",
			wantIDs:       []string{"a1", "a2", "a3"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db := openTest(t)
			createRun(t, db, "run-1")
			for _, e := range tt.evs {
				appendSeq(t, db, "run-1", e)
			}
			ps, err := db.PlanState(ctx, "run-1")
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for i, p := range ps.Phases {
				ids = append(ids, p.ID)
				if p.Index != i {
					t.Errorf("phase %s index %d, want %d", p.ID, p.Index, i)
				}
			}
			if ps.Objective != tt.wantObjective || !reflect.DeepEqual(ids, tt.wantIDs) || ps.Started() != tt.wantStarted {
				t.Errorf("plan %q phases %v started %v; want %q %v %v",
					ps.Objective, ids, ps.Started(), tt.wantObjective, tt.wantIDs, tt.wantStarted)
			}
			// Every event is kept, whether or not it was projected.
			stored, err := db.ListEvents(ctx, "run-1", 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(stored) != len(tt.evs) {
				t.Errorf("stored %d events, want %d", len(stored), len(tt.evs))
			}
		})
	}
}

func TestPlanMalformedDataStillStored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createRun(t, db, "run-1")

	raw := func(typ, phaseID string, attempt int, data string) event.Event {
		e := phaseEvent(typ, phaseID, attempt, nil)
		if data != "" {
			e.Data = json.RawMessage(data)
		}
		return e
	}
	evs := []event.Event{
		raw(event.PlanCreated, "", 0, `{"plan":5}`),
		raw(event.PlanCreated, "", 0, ``),
		raw(event.PhaseStarted, "", 1, `{}`),     // no phase id
		raw(event.PhaseStarted, "gather", 0, ``), // no attempt
		raw(event.PhaseFailed, "gather", 1, `{"reasons":"x"}`),
		raw(event.ArtifactCreated, "gather", 1, `{"path":""}`),
		raw(event.LearningRecorded, "gather", 1, `{"text":"  "}`),
		raw(event.ApproachFailed, "gather", 1, `"nope"`),
		raw(event.VerificationCompleted, "gather", 1, `{"status":1}`),
		raw(event.ReceiptRecorded, "gather", 1, `{"type":"email_sent"}`), // no key
	}
	appendSeq(t, db, "run-1", evs...)

	stored, err := db.ListEvents(ctx, "run-1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != len(evs) {
		t.Fatalf("stored %d events, want %d", len(stored), len(evs))
	}
	if _, err := db.PlanState(ctx, "run-1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("PlanState: err = %v, want ErrNotFound", err)
	}
	for _, table := range []string{"phase_attempts", "artifacts", "learnings", "guardrails", "verifications", "receipts"} {
		var n int
		if err := db.rw.QueryRowContext(context.Background(), `SELECT COUNT(*) FROM `+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("%s has %d rows projected from bad data", table, n)
		}
	}
}

// A database last opened by a binary that knew only migration 0001 gets
// plan state on the next Open and keeps its runs.
func TestMigratePlanStateFromVersion1(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	old, path := oldDatabase(t, "0002_plan_state.sql")
	rw := old.rw.db
	if _, err := rw.Exec(`INSERT INTO runs (id, kind, status, created_at, updated_at)
		VALUES ('run-old', 'harness', 'running', '2026-11-22T08:00:00.000000Z', '2026-11-22T08:00:00.000000Z')`); err != nil {
		t.Fatal(err)
	}
	if got := schemaVersion(t, old); got != 1 {
		t.Fatalf("user_version = %d, want 1", got)
	}
	rw.Close()

	for range 2 { // the second Open has nothing to apply
		db, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := schemaVersion(t, db), migrationCount(t); got != want {
			t.Errorf("user_version = %d, want %d", got, want)
		}
		if _, err := db.GetRun(ctx, "run-old"); err != nil {
			t.Errorf("run lost by the migration: %v", err)
		}
		db.Close()
	}

	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	appendSeq(t, db, "run-old", planEvent(twoPhaseMission))
	ps, err := db.PlanState(ctx, "run-old")
	if err != nil {
		t.Fatal(err)
	}
	if len(ps.Phases) != 2 {
		t.Errorf("phases = %+v, want 2", ps.Phases)
	}
}

// A batch that fails leaves no plan state behind: the projection rolls
// back with the events.
func TestPlanStateRollsBackWithEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createRun(t, db, "run-1")
	appendSeq(t, db, "run-1", event.New(event.RunStarted, nil))

	evs := []event.Event{
		planEvent(twoPhaseMission),
		phaseEvent(event.PhaseStarted, "gather", 1, nil),
		phaseEvent(event.ArtifactCreated, "gather", 1, event.ArtifactData{Path: "sources.md"}),
		event.New(event.Heartbeat, nil),
	}
	for i := range evs {
		evs[i].RunID, evs[i].Seq = "run-1", int64(i+2)
	}
	evs[3].Seq = 1 // taken by run.started
	if err := db.AppendEvents(ctx, evs); err == nil {
		t.Fatal("AppendEvents with a duplicate seq succeeded")
	}
	if _, err := db.PlanState(ctx, "run-1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("PlanState after a failed batch: err = %v, want ErrNotFound", err)
	}
	if as, _ := db.Attempts(ctx, "run-1"); len(as) != 0 {
		t.Errorf("failed batch left attempts: %+v", as)
	}
	if as, _ := db.Artifacts(ctx, "run-1", ""); len(as) != 0 {
		t.Errorf("failed batch left artifacts: %+v", as)
	}
}
