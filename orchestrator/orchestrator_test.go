package orchestrator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"agent/adapter"
	"agent/event"
	"agent/plan"
	"agent/store"
	"agent/tools"
)

// waitLimit bounds every wait in these tests, so a regression fails
// instead of hanging. It is generous: a loaded machine may take seconds
// to schedule what a quiet one does at once, and only a failure waits it
// out.
const waitLimit = time.Minute

// executeLimit bounds one Execute; every test needs far less.
const executeLimit = 3 * time.Minute

var errExecuteLimit = errors.New("test limit reached")

const testRunID = "run0001"

// recordingSink persists events through the run's real journal, as the
// harness does, and keeps the events it stored.
type recordingSink struct {
	j      *store.Journal
	mu     sync.Mutex
	events []event.Event
}

func (s *recordingSink) Emit(ctx context.Context, e event.Event) error {
	stored, err := s.j.Append(ctx, e)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, stored)
	return nil
}

func (s *recordingSink) all() []event.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events)
}

func (s *recordingSink) ofType(typ string) []event.Event {
	var out []event.Event
	for _, e := range s.all() {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// spawnCall is what one child was started with.
type spawnCall struct {
	Cfg  adapter.Config
	Spec adapter.PhaseSpec
}

// fakeSpawner plays `agent runner`. ChildFunc decides what one attempt
// does; a nil ChildFunc, or a nil Result, completes the attempt.
type fakeSpawner struct {
	ChildFunc func(ctx context.Context, c *child) *adapter.Result

	mu    sync.Mutex
	calls []spawnCall
}

func (f *fakeSpawner) Spawn(ctx context.Context, cfg adapter.Config, spec adapter.PhaseSpec) (*adapter.Result, error) {
	f.mu.Lock()
	f.calls = append(f.calls, spawnCall{Cfg: cfg, Spec: spec})
	f.mu.Unlock()
	c := &child{cfg: cfg, spec: spec}
	var res *adapter.Result
	if f.ChildFunc != nil {
		res = f.ChildFunc(ctx, c)
	}
	if res == nil {
		res = completed("done " + spec.PhaseID)
	}
	// Like adapter.Run: a failed OnEvent is returned with the Result.
	return res, c.err
}

func (f *fakeSpawner) all() []spawnCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// started lists the children started, as "PHASE/ATTEMPT", in order.
func (f *fakeSpawner) started() []string {
	var out []string
	for _, c := range f.all() {
		out = append(out, fmt.Sprintf("%s/%d", c.Spec.PhaseID, c.Spec.Attempt))
	}
	return out
}

func (f *fakeSpawner) call(t *testing.T, phaseID string, attempt int) spawnCall {
	t.Helper()
	for _, c := range f.all() {
		if c.Spec.PhaseID == phaseID && c.Spec.Attempt == attempt {
			return c
		}
	}
	t.Fatalf("no child was started for %s/%d; started: %v", phaseID, attempt, f.started())
	return spawnCall{}
}

func (f *fakeSpawner) prompt(t *testing.T, phaseID string, attempt int) string {
	t.Helper()
	return f.call(t, phaseID, attempt).Spec.Prompt
}

// child is one fake attempt: what it writes and reports goes where the
// real adapter would send it.
type child struct {
	cfg  adapter.Config
	spec adapter.PhaseSpec
	err  error // the first failure; Spawn returns it
}

func (c *child) key() string { return fmt.Sprintf("%s/%d", c.spec.PhaseID, c.spec.Attempt) }

// emit forwards an event the way the adapter does, with the run, phase
// and attempt filled in.
func (c *child) emit(typ string, data any) {
	e := event.New(typ, data)
	e.RunID, e.PhaseID, e.Attempt = c.spec.RunID, c.spec.PhaseID, c.spec.Attempt
	if err := c.cfg.OnEvent(e); err != nil && c.err == nil {
		c.err = err
	}
}

// writeFile writes a workspace file, as write_file would, and reports the artifact.
func (c *child) writeFile(rel, content string) {
	path := filepath.Join(c.spec.Workspace, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil && c.err == nil {
		c.err = err
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil && c.err == nil {
		c.err = err
	}
	sum := sha256.Sum256([]byte(content))
	c.emit(event.ArtifactCreated, event.ArtifactData{Path: rel, SHA256: hex.EncodeToString(sum[:]), Bytes: int64(len(content))})
}

func (c *child) learn(text string) { c.emit(event.LearningRecorded, event.LearningData{Text: text}) }

func (c *child) abandon(approach, why string) {
	c.emit(event.ApproachFailed, event.ApproachData{Approach: approach, Why: why})
}

func completed(output string) *adapter.Result {
	return &adapter.Result{Status: event.StatusCompleted, Output: output}
}

// ended is an attempt that did not complete: failed, crashed, timeout or cancelled.
func ended(status, reason string) *adapter.Result {
	return &adapter.Result{Status: status, Reason: reason, ExitCode: 1}
}

// fixture is one harness run on a real store with a fake child.
type fixture struct {
	t      *testing.T
	db     *store.DB
	ws     string
	runDir string
	cfg    Config
	spawn  *fakeSpawner
	sink   *recordingSink
	o      *Orchestrator
}

func newFixture(t *testing.T, tweak func(*Config)) *fixture {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(filepath.Join(t.TempDir(), "agent.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ws := t.TempDir()
	if err := db.CreateRun(ctx, &store.Run{ID: testRunID, Kind: store.KindHarness, Workspace: ws, Prompt: "do it"}, "", 0); err != nil {
		t.Fatal(err)
	}
	fx := &fixture{t: t, db: db, ws: ws, runDir: filepath.Join(ws, ".agent", "runs", testRunID), spawn: &fakeSpawner{}}
	fx.cfg = Config{Store: db, RunID: testRunID, Workspace: ws, RunDir: fx.runDir,
		Intents: func(context.Context, store.Receipt) adapter.Control { return adapter.Control{Proceed: true} }}
	if tweak != nil {
		tweak(&fx.cfg)
	}
	fx.restart()
	return fx
}

// restart is a new harness process on the same run: a journal that
// continues after the last event, and a new orchestrator.
func (fx *fixture) restart() {
	fx.t.Helper()
	j, err := fx.db.Journal(context.Background(), testRunID, "")
	if err != nil {
		fx.t.Fatal(err)
	}
	fx.sink = &recordingSink{j: j}
	cfg := fx.cfg
	cfg.Sink, cfg.Spawn = fx.sink, fx.spawn.Spawn
	if fx.o, err = New(cfg); err != nil {
		fx.t.Fatal(err)
	}
}

func (fx *fixture) adopt(phases ...plan.Phase) *plan.Plan {
	fx.t.Helper()
	p := &plan.Plan{Objective: "Ship the quarterly market report", Phases: phases}
	if err := fx.o.Adopt(context.Background(), p); err != nil {
		fx.t.Fatal(err)
	}
	return p
}

// execute runs Execute, bounded so that a regression that loops (say,
// retrying forever) fails instead of hanging.
func (fx *fixture) execute(ctx context.Context) *Outcome {
	fx.t.Helper()
	ctx, cancel := context.WithTimeoutCause(ctx, executeLimit, errExecuteLimit)
	defer cancel()
	out, err := fx.o.Execute(ctx)
	if errors.Is(context.Cause(ctx), errExecuteLimit) {
		started := fx.spawn.started()
		fx.t.Fatalf("Execute did not finish within %v; %d children started, the first: %v",
			executeLimit, len(started), started[:min(len(started), 10)])
	}
	if err != nil {
		fx.t.Fatalf("Execute: %v", err)
	}
	return out
}

func (fx *fixture) phases() map[string]store.Phase {
	fx.t.Helper()
	st, err := fx.db.PlanState(context.Background(), testRunID)
	if err != nil {
		fx.t.Fatal(err)
	}
	out := map[string]store.Phase{}
	for _, p := range st.Phases {
		out[p.ID] = p
	}
	return out
}

// attemptStatuses returns the statuses of a phase's attempts, oldest first.
func (fx *fixture) attemptStatuses(phaseID string) []string {
	fx.t.Helper()
	as, err := fx.db.Attempts(context.Background(), testRunID)
	if err != nil {
		fx.t.Fatal(err)
	}
	var out []string
	for _, a := range as {
		if a.PhaseID == phaseID {
			out = append(out, a.Status)
		}
	}
	return out
}

func (fx *fixture) readRunFile(name string) string {
	fx.t.Helper()
	data, err := os.ReadFile(filepath.Join(fx.runDir, name))
	if err != nil {
		fx.t.Fatal(err)
	}
	return string(data)
}

// phaseData returns the data of one phase's events of one type, in order.
func (fx *fixture) phaseData(typ, phaseID string) []event.PhaseData {
	fx.t.Helper()
	var out []event.PhaseData
	for _, e := range fx.sink.ofType(typ) {
		if e.PhaseID != phaseID {
			continue
		}
		var d event.PhaseData
		if err := e.Decode(&d); err != nil {
			fx.t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

// ph is a phase with evidence none and the default budget.
func ph(id string, deps ...string) plan.Phase {
	return plan.Phase{
		ID: id, Title: "Title of " + id, Instructions: "Do the " + id + " work.",
		DependsOn: deps, Evidence: plan.Evidence{Type: plan.EvidenceNone},
	}
}

// needs makes a phase's evidence the given workspace files.
func needs(p plan.Phase, files ...string) plan.Phase {
	p.Evidence = plan.Evidence{Type: plan.EvidenceArtifact, Artifacts: files}
	return p
}

func attempts(p plan.Phase, n int) plan.Phase {
	p.MaxAttempts = n
	return p
}

func mustContain(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s does not contain %q:\n%s", what, sub, s)
		}
	}
}

func mustNotContain(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			t.Errorf("%s contains %q:\n%s", what, sub, s)
		}
	}
}

func TestNewRequiresStoreSinkRunAndRunDir(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, nil)
	full := fx.cfg
	full.Sink = fx.sink
	for name, breakIt := range map[string]func(*Config){
		"no store":   func(c *Config) { c.Store = nil },
		"no sink":    func(c *Config) { c.Sink = nil },
		"no run id":  func(c *Config) { c.RunID = "" },
		"no run dir": func(c *Config) { c.RunDir = "" },
		"workspace missing": func(c *Config) {
			c.Workspace = filepath.Join(fx.ws, "nope")
		},
	} {
		cfg := full
		breakIt(&cfg)
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
}

func TestPlanAdoptsThePlannersPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fx := newFixture(t, nil)
	submitted := `{"objective":"Write a market report","phases":[
		{"id":"gather","title":"Gather sources","instructions":"Find sources.","evidence":{"type":"artifact","artifacts":["sources.md"]}},
		{"id":"report","instructions":"Write it.","depends_on":["gather"],"evidence":{"type":"none"},"max_attempts":2}]}`
	fx.spawn.ChildFunc = func(ctx context.Context, c *child) *adapter.Result { return completed(submitted) }

	p, err := fx.o.Plan(ctx, "write me a market report on e-bikes")
	if err != nil {
		t.Fatal(err)
	}
	if p.Objective != "Write a market report" || len(p.Phases) != 2 || p.Phases[1].Title != "report" {
		t.Errorf("plan = %+v", p)
	}

	// The planner child: its own phase id, plan mode, read-only tools
	// plus submit_plan, the request in its prompt.
	calls := fx.spawn.all()
	if len(calls) != 1 {
		t.Fatalf("started %v, want one planner", fx.spawn.started())
	}
	spec, cfg := calls[0].Spec, calls[0].Cfg
	if spec.PhaseID != event.PlannerPhaseID || spec.Attempt != 1 || spec.Mode != adapter.ModePlan || spec.RunID != testRunID {
		t.Errorf("planner spec = %+v", spec)
	}
	if want := []string{"read_file", "list_files", "grep", tools.SubmitPlanName}; !reflect.DeepEqual(spec.Tools, want) {
		t.Errorf("planner tools = %v, want %v", spec.Tools, want)
	}
	mustContain(t, "planner prompt", spec.Prompt, "write me a market report on e-bikes")
	if spec.Model.Scope != "_plan/1" {
		t.Errorf("planner scope = %q", spec.Model.Scope)
	}
	if want := filepath.Join(fx.runDir, "logs", "_plan-1.log"); cfg.LogPath != want {
		t.Errorf("planner log = %q, want %q", cfg.LogPath, want)
	}

	// mission.json, beside progress.md, holds the validated plan.
	if fx.o.MissionPath() != filepath.Join(fx.runDir, "mission.json") {
		t.Errorf("MissionPath = %s", fx.o.MissionPath())
	}
	onDisk, err := plan.Parse([]byte(fx.readRunFile("mission.json")))
	if err != nil {
		t.Fatalf("mission.json: %v", err)
	}
	if !bytes.Equal(onDisk.JSON(), p.JSON()) {
		t.Errorf("mission.json =\n%s\nwant\n%s", onDisk.JSON(), p.JSON())
	}
	mustContain(t, "progress.md", fx.readRunFile("progress.md"), "| gather | pending | 0 |", "| report | pending | 0 | gather |")

	// plan.created is in the journal, and projected.
	created := fx.sink.ofType(event.PlanCreated)
	if len(created) != 1 {
		t.Fatalf("plan.created events: %d", len(created))
	}
	var d event.PlanData
	if err := created[0].Decode(&d); err != nil {
		t.Fatal(err)
	}
	if d.Path != filepath.Join(".agent", "runs", testRunID, "mission.json") {
		t.Errorf("plan.created path = %q", d.Path)
	}
	phases := fx.phases()
	if g, r := phases["gather"], phases["report"]; g.Status != event.StatusPending || g.MaxAttempts != 3 ||
		r.MaxAttempts != 2 || !reflect.DeepEqual(r.DependsOn, []string{"gather"}) {
		t.Errorf("projected phases = %+v", phases)
	}
}

func TestPlanFailures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		res        *adapter.Result
		wantReason string
		provider   bool
	}{
		{"no phases", completed(`{"objective":"x","phases":[]}`), "phases", false},
		{"not json", completed("I could not come up with a plan."), "not valid JSON", false},
		{"cycle", completed(`{"objective":"x","phases":[
			{"id":"a","instructions":"a","depends_on":["b"],"evidence":{"type":"none"}},
			{"id":"b","instructions":"b","depends_on":["a"],"evidence":{"type":"none"}}]}`), "cycle", false},
		{"runner failed", ended(event.StatusFailed, "max turns (20) reached without submit_plan"), "max turns (20) reached", false},
		{"crashed", ended(event.StatusCrashed, "runner exited without a result"), "without a result", false},
		{"provider", &adapter.Result{Status: event.StatusFailed, Reason: "model provider: 401 Unauthorized", ExitCode: 0,
			Report: &event.RunnerResultData{Status: event.StatusFailed, Reason: event.ReasonProvider}}, "401 Unauthorized", true},
		// Invalid plans stop the run as an invalid plan file does, saying the last one's error.
		{"invalid plans", &adapter.Result{Status: event.StatusFailed, Reason: event.ReasonInvalidPlan, Report: &event.RunnerResultData{
			Status: event.StatusFailed, Reason: event.ReasonInvalidPlan, Detail: "the planner submitted 3 invalid plans; the last: invalid plan: phases: a plan needs at least one phase"}},
			"the last: invalid plan: phases", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fx := newFixture(t, nil)
			fx.spawn.ChildFunc = func(context.Context, *child) *adapter.Result { return tc.res }
			p, err := fx.o.Plan(context.Background(), "plan something")
			var pe *PlanError
			if !errors.As(err, &pe) {
				t.Fatalf("Plan = %v, %v; want a *PlanError", p, err)
			}
			if !strings.Contains(pe.Reason, tc.wantReason) || (pe.Stop == event.ReasonProvider) != tc.provider ||
				(pe.Stop == event.ReasonInvalidPlan) != (tc.name == "invalid plans") {
				t.Errorf("PlanError = %+v, want reason with %q and provider failure %v", pe, tc.wantReason, tc.provider)
			}
			if _, err := fx.db.PlanState(context.Background(), testRunID); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("a plan was stored: %v", err)
			}
			if _, err := os.Stat(fx.o.MissionPath()); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("mission.json written: %v", err)
			}
			if n := len(fx.sink.ofType(event.PlanCreated)); n != 0 {
				t.Errorf("plan.created events: %d", n)
			}
		})
	}
}

func TestPlanInterruptedIsNotAPlanError(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	fx.spawn.ChildFunc = func(ctx context.Context, c *child) *adapter.Result {
		cancel()
		return ended(event.StatusCancelled, "cancelled: context canceled")
	}
	_, err := fx.o.Plan(ctx, "plan something")
	var pe *PlanError
	if !errors.Is(err, context.Canceled) || errors.As(err, &pe) {
		t.Errorf("Plan = %v, want context.Canceled", err)
	}
}

func TestAdoptRefusedOnceAPhaseStarted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fx := newFixture(t, nil)
	fx.adopt(ph("old"))
	// Before any phase started, a new plan replaces the old one.
	second := fx.adopt(ph("first"), ph("second", "first"))
	if _, ok := fx.phases()["old"]; ok || len(fx.phases()) != 2 {
		t.Errorf("phases after re-planning = %v", fx.phases())
	}
	// An invalid plan is refused with the field named.
	var planErr *plan.Error
	if err := fx.o.Adopt(ctx, &plan.Plan{Objective: "x", Phases: []plan.Phase{ph("Bad Id")}}); !errors.As(err, &planErr) {
		t.Errorf("Adopt(invalid) = %v, want a *plan.Error", err)
	}

	started := event.New(event.PhaseStarted, event.PhaseData{Title: "first"})
	started.PhaseID, started.Attempt = "first", 1
	if err := fx.sink.Emit(ctx, started); err != nil {
		t.Fatal(err)
	}
	err := fx.o.Adopt(ctx, &plan.Plan{Objective: "Something else", Phases: []plan.Phase{ph("other")}})
	if err == nil || !strings.Contains(err.Error(), "cannot change once a phase has started") {
		t.Fatalf("Adopt after a phase started = %v", err)
	}
	if got := fx.readRunFile("mission.json"); got != string(second.JSON()) {
		t.Errorf("mission.json changed:\n%s", got)
	}
	if n := len(fx.sink.ofType(event.PlanCreated)); n != 2 {
		t.Errorf("plan.created events: %d, want 2", n)
	}
	if _, ok := fx.phases()["first"]; !ok {
		t.Errorf("stored phases changed: %v", fx.phases())
	}
}

func TestExecuteRunsReadyPhasesInPlanOrder(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, nil) // Parallel 1
	fx.adopt(
		ph("report", "gather", "analyze"), // first in the plan, ready last
		ph("gather"),
		ph("analyze", "gather"),
		ph("extra"),
	)
	fx.spawn.ChildFunc = func(ctx context.Context, c *child) *adapter.Result {
		return completed("summary of " + c.spec.PhaseID)
	}
	out := fx.execute(context.Background())
	if want := (&Outcome{Status: event.StatusCompleted, Result: "summary of extra"}); !reflect.DeepEqual(out, want) {
		t.Errorf("outcome = %+v, want %+v", out, want)
	}
	// Ready at the start: gather, extra -> gather. Then analyze, extra ->
	// analyze. Then report (plan index 0), extra.
	if got, want := fx.spawn.started(), []string{"gather/1", "analyze/1", "report/1", "extra/1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("children started = %v, want %v", got, want)
	}
	// One at a time: every phase.started is followed by its own end.
	var open string
	for _, e := range fx.sink.all() {
		switch e.Type {
		case event.PhaseStarted:
			if open != "" {
				t.Errorf("%s started while %s was running", e.PhaseID, open)
			}
			open = e.PhaseID
		case event.PhaseCompleted, event.PhaseFailed:
			if e.PhaseID != open {
				t.Errorf("%s ended while %s was running", e.PhaseID, open)
			}
			open = ""
		}
	}
	for id, p := range fx.phases() {
		if p.Status != event.StatusCompleted || p.Attempts != 1 || p.Output != "summary of "+id {
			t.Errorf("phase %s = %s, %d attempts, output %q", id, p.Status, p.Attempts, p.Output)
		}
	}
	for _, c := range fx.spawn.all() {
		if c.Spec.Mode != adapter.ModePhase || c.Cfg.Timeout != DefaultPhaseTimeout {
			t.Errorf("%s: mode %q, timeout %v", c.Spec.PhaseID, c.Spec.Mode, c.Cfg.Timeout)
		}
		mustContain(t, c.Spec.PhaseID+" prompt", c.Spec.Prompt, "Attempt 1 of 3.", "Do the "+c.Spec.PhaseID+" work.",
			"Ship the quarterly market report")
	}

	// Executing a finished run again runs nothing.
	fx.restart()
	if out := fx.execute(context.Background()); out.Status != event.StatusCompleted {
		t.Errorf("second Execute = %+v", out)
	}
	if n := len(fx.spawn.all()); n != 4 {
		t.Errorf("children after a second Execute: %v", fx.spawn.started())
	}
}

func TestExecuteRunsIndependentPhasesConcurrently(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, func(c *Config) { c.Parallel = 2 })
	fx.adopt(
		attempts(ph("left"), 1),
		attempts(ph("right"), 1),
		ph("extra"),
		ph("join", "left", "right"),
	)
	var inFlight, most, arrived atomic.Int32
	bothIn := make(chan struct{})
	fx.spawn.ChildFunc = func(ctx context.Context, c *child) *adapter.Result {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		switch c.spec.PhaseID {
		case "left", "right":
			// Each waits for the other: they only finish if they run at once.
			if arrived.Add(1) == 2 {
				close(bothIn)
			}
			select {
			case <-bothIn:
			case <-time.After(waitLimit):
				return ended(event.StatusFailed, "the other independent phase never ran alongside this one")
			}
		case "join":
			for _, dep := range []string{"left", "right"} {
				if s := fx.phases()[dep].Status; s != event.StatusCompleted {
					t.Errorf("join started while %s was %s", dep, s)
				}
			}
		}
		return completed("summary of " + c.spec.PhaseID)
	}
	out := fx.execute(context.Background())
	if out.Status != event.StatusCompleted {
		t.Fatalf("outcome = %+v", out)
	}
	if m := most.Load(); m != 2 {
		t.Errorf("at most %d children ran at once, want 2", m)
	}
	if got := fx.spawn.started(); len(got) != 4 || !slices.Contains(got[:2], "left/1") || !slices.Contains(got[:2], "right/1") {
		t.Errorf("children started = %v, want left and right first", got)
	}
	// In the journal, join starts after both its dependencies completed.
	pos := map[string]int{}
	for i, e := range fx.sink.all() {
		pos[e.Type+" "+e.PhaseID] = i
	}
	for _, dep := range []string{"left", "right"} {
		if pos[event.PhaseStarted+" join"] < pos[event.PhaseCompleted+" "+dep] {
			t.Errorf("join started before %s completed", dep)
		}
	}
}

func TestExecuteRetriesWithGuardrailsUntilExhausted(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, nil)
	fx.adopt(
		attempts(needs(ph("report"), "report.md"), 3),
		ph("publish", "report"),
	)
	const crash = "runner exited without a result: signal: segmentation fault"
	const timeout = "phase timed out after 30m0s"
	fx.spawn.ChildFunc = func(ctx context.Context, c *child) *adapter.Result {
		switch c.key() {
		case "report/1":
			c.abandon("scraping the vendor site", "it sits behind a captcha")
			return completed("I wrote the report") // but no report.md
		case "report/2":
			return ended(event.StatusCrashed, crash)
		case "report/3":
			return ended(event.StatusTimeout, timeout)
		}
		t.Errorf("unexpected child %s", c.key())
		return ended(event.StatusFailed, "unexpected")
	}
	out := fx.execute(context.Background())
	want := &Outcome{Status: event.StatusFailed, FailedPhase: "report", Reasons: []string{timeout}}
	if !reflect.DeepEqual(out, want) {
		t.Errorf("outcome = %+v, want %+v", out, want)
	}
	if got, want := fx.spawn.started(), []string{"report/1", "report/2", "report/3"}; !reflect.DeepEqual(got, want) {
		t.Errorf("children started = %v, want %v (publish depends on the failed phase)", got, want)
	}

	p1 := fx.spawn.prompt(t, "report", 1)
	mustContain(t, "attempt 1 prompt", p1, "Attempt 1 of 3.", "the file report.md exists in the workspace and is not empty")
	mustNotContain(t, "attempt 1 prompt", p1, "GUARDRAILS")

	p2 := fx.spawn.prompt(t, "report", 2)
	mustContain(t, "attempt 2 prompt", p2, "Attempt 2 of 3.", "GUARDRAILS",
		"attempt 1, verification failed: ", "report.md: missing",
		"attempt 1, failed approach: scraping the vendor site — it sits behind a captcha")

	p3 := fx.spawn.prompt(t, "report", 3)
	mustContain(t, "attempt 3 prompt", p3, "Attempt 3 of 3.", "GUARDRAILS", "report.md: missing",
		"scraping the vendor site", "attempt 2 crashed: "+crash)

	var retry []bool
	var reasons []string
	for _, d := range fx.phaseData(event.PhaseFailed, "report") {
		retry = append(retry, d.WillRetry)
		reasons = append(reasons, d.Reason)
	}
	if !reflect.DeepEqual(retry, []bool{true, true, false}) {
		t.Errorf("phase.failed will_retry = %v", retry)
	}
	if !strings.Contains(reasons[0], "report.md: missing") || reasons[1] != crash || reasons[2] != timeout {
		t.Errorf("phase.failed reasons = %q", reasons)
	}
	if got := fx.attemptStatuses("report"); !reflect.DeepEqual(got, []string{event.StatusFailed, event.StatusCrashed, event.StatusTimeout}) {
		t.Errorf("report attempts = %v", got)
	}
	phases := fx.phases()
	if phases["report"].Status != event.StatusFailed || phases["publish"].Status != event.StatusPending || phases["publish"].Attempts != 0 {
		t.Errorf("phases = report %s, publish %s (%d attempts)", phases["report"].Status, phases["publish"].Status, phases["publish"].Attempts)
	}
	mustContain(t, "progress.md", fx.readRunFile("progress.md"),
		"| report | failed | 3 |", "| publish | pending | 0 | report |", "report attempt 2 crashed: "+crash)
}

func TestExecuteRunnerFailureIsAGuardrail(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, nil)
	fx.adopt(ph("draft"))
	fx.spawn.ChildFunc = func(ctx context.Context, c *child) *adapter.Result {
		if c.spec.Attempt == 1 {
			return ended(event.StatusFailed, "max turns (20) reached before the phase was done")
		}
		return nil
	}
	if out := fx.execute(context.Background()); out.Status != event.StatusCompleted {
		t.Fatalf("outcome = %+v", out)
	}
	mustContain(t, "attempt 2 prompt", fx.spawn.prompt(t, "draft", 2), "Attempt 2 of 3.",
		"GUARDRAILS", "attempt 1 failed: max turns (20) reached before the phase was done")
}

func TestExecuteProviderFailureStopsWithoutRetry(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, nil)
	fx.adopt(ph("draft"), ph("send", "draft"))
	const reason = "model provider: 401 Unauthorized: invalid api key"
	fx.spawn.ChildFunc = func(ctx context.Context, c *child) *adapter.Result {
		return &adapter.Result{Status: event.StatusFailed, Reason: reason,
			Report: &event.RunnerResultData{Status: event.StatusFailed, Reason: event.ReasonProvider}}
	}
	out := fx.execute(context.Background())
	want := &Outcome{Status: event.StatusFailed, FailedPhase: "draft", Reasons: []string{reason}, Stop: event.ReasonProvider}
	if !reflect.DeepEqual(out, want) {
		t.Errorf("outcome = %+v, want %+v", out, want)
	}
	if got := fx.spawn.started(); !reflect.DeepEqual(got, []string{"draft/1"}) {
		t.Errorf("children started = %v, want only draft/1", got)
	}
	failed := fx.phaseData(event.PhaseFailed, "draft")
	if len(failed) != 1 || failed[0].WillRetry {
		t.Errorf("phase.failed = %+v", failed)
	}
	if s := fx.phases()["draft"].Status; s != event.StatusFailed {
		t.Errorf("draft is %s", s)
	}
}

func TestResumeAfterInterruptRestartsTheInterruptedPhase(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, nil)
	fx.adopt(ph("fetch"), attempts(ph("build", "fetch"), 2), ph("ship", "build"))

	ctx, cancel := context.WithCancel(context.Background())
	fx.spawn.ChildFunc = func(cctx context.Context, c *child) *adapter.Result {
		if c.spec.PhaseID != "build" {
			return completed("fetched")
		}
		cancel() // Ctrl-C while build runs
		select {
		case <-cctx.Done():
		case <-time.After(waitLimit):
			t.Error("the child's ctx was not cancelled")
		}
		return ended(event.StatusCancelled, "cancelled: context canceled")
	}
	if out := fx.execute(ctx); !reflect.DeepEqual(out, &Outcome{Status: event.StatusInterrupted}) {
		t.Fatalf("outcome = %+v, want interrupted", out)
	}
	cancelled := fx.phaseData(event.PhaseFailed, "build")
	if len(cancelled) != 1 || cancelled[0].Status != event.StatusCancelled || cancelled[0].WillRetry {
		t.Errorf("build phase.failed = %+v", cancelled)
	}
	phases := fx.phases()
	if phases["fetch"].Status != event.StatusCompleted || phases["build"].Status != event.StatusPending || phases["ship"].Attempts != 0 {
		t.Errorf("phases after the interrupt: fetch %s, build %s, ship %d attempts",
			phases["fetch"].Status, phases["build"].Status, phases["ship"].Attempts)
	}
	mustContain(t, "progress.md", fx.readRunFile("progress.md"), "| fetch | completed | 1 |", "| build | pending | 1 |")

	// Resume: a new process, a new ctx.
	fx.restart()
	fx.spawn.ChildFunc = func(ctx context.Context, c *child) *adapter.Result {
		if c.key() == "build/2" {
			return ended(event.StatusFailed, "tests did not pass")
		}
		return completed("summary of " + c.key())
	}
	out := fx.execute(context.Background())
	if out.Status != event.StatusCompleted || out.Result != "summary of ship/1" {
		t.Fatalf("resumed outcome = %+v", out)
	}
	if got, want := fx.spawn.started(), []string{"fetch/1", "build/1", "build/2", "build/3", "ship/1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("children started = %v, want %v", got, want)
	}
	// The cancelled attempt used none of the budget of 2: attempt 2 is the
	// first try of the budget, and its failure is retried.
	p2 := fx.spawn.prompt(t, "build", 2)
	mustContain(t, "build/2 prompt", p2, "Attempt 1 of 2.")
	mustNotContain(t, "build/2 prompt", p2, "GUARDRAILS")
	mustContain(t, "build/3 prompt", fx.spawn.prompt(t, "build", 3), "Attempt 2 of 2.", "attempt 2 failed: tests did not pass")
	if d := fx.phaseData(event.PhaseFailed, "build"); len(d) != 1 || !d[0].WillRetry {
		t.Errorf("build/2 phase.failed = %+v, want will_retry", d)
	}
	if got := fx.attemptStatuses("build"); !reflect.DeepEqual(got, []string{event.StatusCancelled, event.StatusFailed, event.StatusPassed}) {
		t.Errorf("build attempts = %v", got)
	}
}

func TestResumeAfterCrashInterruptsTheRunningAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fx := newFixture(t, nil)
	fx.adopt(ph("one"), ph("two", "one"))
	// The harness died while one/1 ran: phase.started is all it left.
	started := event.New(event.PhaseStarted, event.PhaseData{Title: "Title of one"})
	started.PhaseID, started.Attempt = "one", 1
	if err := fx.sink.Emit(ctx, started); err != nil {
		t.Fatal(err)
	}

	fx.restart()
	if out := fx.execute(ctx); out.Status != event.StatusCompleted {
		t.Fatalf("outcome = %+v", out)
	}
	evs := fx.sink.all()
	if len(evs) == 0 || evs[0].Type != event.Warning {
		t.Fatalf("first event after the restart = %+v, want a warning", evs)
	}
	var w event.WarningData
	if err := evs[0].Decode(&w); err != nil {
		t.Fatal(err)
	}
	mustContain(t, "warning", w.Message, "phase one attempt 1 was interrupted")
	if got, want := fx.spawn.started(), []string{"one/2", "two/1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("children started = %v, want %v", got, want)
	}
	p := fx.spawn.prompt(t, "one", 2)
	mustContain(t, "one/2 prompt", p, "Attempt 1 of 3.")
	mustNotContain(t, "one/2 prompt", p, "GUARDRAILS")
	if got := fx.attemptStatuses("one"); !reflect.DeepEqual(got, []string{event.StatusInterrupted, event.StatusPassed}) {
		t.Errorf("attempts of one = %v", got)
	}
}

func TestResumeGivesAFailedPhaseAFreshBudget(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, nil)
	fx.adopt(attempts(needs(ph("compile"), "out.txt"), 2), ph("package", "compile"))
	fx.spawn.ChildFunc = func(ctx context.Context, c *child) *adapter.Result {
		return completed("compiled, I think")
	}
	out := fx.execute(context.Background())
	if out.Status != event.StatusFailed || out.FailedPhase != "compile" || len(out.Reasons) != 1 || !strings.Contains(out.Reasons[0], "out.txt: missing") {
		t.Fatalf("outcome = %+v", out)
	}
	if s := fx.phases()["compile"].Status; s != event.StatusFailed {
		t.Fatalf("compile is %s", s)
	}

	fx.restart()
	fx.spawn.ChildFunc = func(ctx context.Context, c *child) *adapter.Result {
		if c.key() == "compile/4" {
			c.writeFile("out.txt", "binary")
		}
		return completed("summary of " + c.key())
	}
	if out := fx.execute(context.Background()); out.Status != event.StatusCompleted {
		t.Fatalf("resumed outcome = %+v", out)
	}
	if got, want := fx.spawn.started(), []string{"compile/1", "compile/2", "compile/3", "compile/4", "package/1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("children started = %v, want %v", got, want)
	}
	// A fresh budget of 2, with the lessons of the earlier attempts kept.
	mustContain(t, "compile/3 prompt", fx.spawn.prompt(t, "compile", 3), "Attempt 1 of 2.", "GUARDRAILS",
		"attempt 1, verification failed: ", "attempt 2, verification failed: ")
	mustContain(t, "compile/4 prompt", fx.spawn.prompt(t, "compile", 4), "Attempt 2 of 2.", "attempt 3, verification failed: ")
	var retry []bool
	for _, d := range fx.phaseData(event.PhaseFailed, "compile") {
		retry = append(retry, d.WillRetry)
	}
	if !reflect.DeepEqual(retry, []bool{true}) {
		t.Errorf("will_retry of compile/3 = %v, want [true]", retry)
	}
}

func TestDependentPhasePromptCarriesResultsAndLearnings(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, nil)
	gather := needs(ph("gather"), "sources.md")
	gather.Title = "Gather sources"
	analyze := ph("analyze")
	analyze.Title = "Analyze prices"
	fx.adopt(gather, analyze, needs(ph("report", "gather", "analyze"), "report.md"))

	// A huge summary of multi-byte runes, with a marker past the limit.
	huge := strings.Repeat("€", 3000) + " TAIL-MARKER"
	fx.spawn.ChildFunc = func(ctx context.Context, c *child) *adapter.Result {
		switch c.spec.PhaseID {
		case "gather":
			c.writeFile("sources.md", "v1")
			c.writeFile("notes/raw.md", "raw")
			c.writeFile("sources.md", "v2")
			c.learn("the price API pages by 50")
			return completed(huge)
		case "analyze":
			c.writeFile("analysis.md", "cheap")
			c.learn("prices are in EUR")
			return completed("Analysis is in analysis.md")
		case "report":
			c.writeFile("report.md", "# Report")
			return completed("Report written")
		}
		return nil
	}
	if out := fx.execute(context.Background()); out.Status != event.StatusCompleted || out.Result != "Report written" {
		t.Fatalf("outcome = %+v", out)
	}

	first := fx.spawn.prompt(t, "gather", 1)
	mustNotContain(t, "gather prompt", first, "Results of the phases", "Learnings recorded")
	// Learnings reach later phases, dependencies or not.
	mustContain(t, "analyze prompt", fx.spawn.prompt(t, "analyze", 1), "- gather: the price API pages by 50")
	mustNotContain(t, "analyze prompt", fx.spawn.prompt(t, "analyze", 1), "Results of the phases")

	p := fx.spawn.prompt(t, "report", 1)
	mustContain(t, "report prompt", p,
		"Results of the phases this one depends on:",
		"## gather — Gather sources\nFiles: sources.md, notes/raw.md\nSummary:\n€€€",
		"…[clipped]",
		"## analyze — Analyze prices\nFiles: analysis.md\nSummary:\nAnalysis is in analysis.md",
		"- gather: the price API pages by 50",
		"- analyze: prices are in EUR",
		"the file report.md exists in the workspace and is not empty",
	)
	mustNotContain(t, "report prompt", p, "TAIL-MARKER")
	if n := strings.Count(p, "sources.md"); n != 1 {
		t.Errorf("sources.md appears %d times in the report prompt, want once", n)
	}
	if n := strings.Count(p, "€"); n < 1300 || n > outputLimit/len("€") {
		t.Errorf("the clipped summary keeps %d of 3000 runes, want about %d", n, outputLimit/len("€"))
	}
	if !utf8.ValidString(p) {
		t.Error("the report prompt is not valid UTF-8: a rune was cut in half")
	}
}

func TestProgressAndFindingsArtifacts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fx := newFixture(t, nil)
	fx.adopt(needs(ph("draft"), "draft.md"), ph("review", "draft"))
	fx.spawn.ChildFunc = func(ctx context.Context, c *child) *adapter.Result {
		if c.key() == "draft/2" {
			c.writeFile("draft.md", "# Draft")
		}
		return completed("summary of " + c.key())
	}
	if out := fx.execute(ctx); out.Status != event.StatusCompleted {
		t.Fatalf("outcome = %+v", out)
	}

	mustContain(t, "progress.md", fx.readRunFile("progress.md"),
		"Objective: Ship the quarterly market report",
		"| draft | completed | 2 |", "| review | completed | 1 | draft |",
		"## Failed attempts", "- draft attempt 1 failed: draft.md: missing")

	type finding struct {
		phase   string
		attempt int
		status  string
	}
	want := []finding{{"draft", 1, "fail"}, {"draft", 2, "pass"}, {"review", 1, "pass"}}
	var got []finding
	for _, e := range fx.sink.ofType(event.VerificationCompleted) {
		var d event.VerificationData
		if err := e.Decode(&d); err != nil {
			t.Fatal(err)
		}
		got = append(got, finding{e.PhaseID, e.Attempt, d.Status})
		rel := filepath.Join(".agent", "runs", testRunID, "verification", fmt.Sprintf("%s-%d.json", e.PhaseID, e.Attempt))
		if d.Path != rel {
			t.Errorf("verification.completed %s/%d path = %q, want %q", e.PhaseID, e.Attempt, d.Path, rel)
		}
		raw, err := os.ReadFile(filepath.Join(fx.ws, rel))
		if err != nil {
			t.Errorf("findings artifact: %v", err)
			continue
		}
		var f struct {
			VerificationID string `json:"verification_id"`
			TaskID         string `json:"task_id"`
			EvidenceType   string `json:"evidence_type"`
			Status         string `json:"status"`
			Attempt        int    `json:"attempt"`
		}
		if err := json.Unmarshal(raw, &f); err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		if f.VerificationID == "" || f.TaskID != e.PhaseID || f.Attempt != e.Attempt || f.Status != d.Status || f.EvidenceType != d.EvidenceType {
			t.Errorf("%s = %+v, event data %+v", rel, f, d)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("verifications = %v, want %v", got, want)
	}
	vs, err := fx.db.Verifications(ctx, testRunID)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 3 || vs[0].Path != filepath.Join(".agent", "runs", testRunID, "verification", "draft-1.json") {
		t.Errorf("stored verifications = %+v", vs)
	}
}

func TestSpawnGetsConfigModelScopeAndDoneReceipts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	model := adapter.Model{Name: "gpt-test", BaseURL: "http://127.0.0.1:9/v1", MaxAttempts: 2, Replay: "/tmp/cassette.jsonl"}
	fx := newFixture(t, func(c *Config) {
		c.SessionID = "sess-1"
		c.Model = model
		c.Tools = []string{"read_file", "send_email"}
		c.MaxTurns, c.ContextBudget = 12, 50000
		c.PhaseTimeout = 7 * time.Minute
		c.Exe, c.Env = "/opt/agent/bin/agent", []string{"OPENAI_API_KEY=sk-test"}
		c.HeartbeatTimeout, c.Grace = 3*time.Second, time.Second
	})
	notify := ph("notify")
	notify.Evidence = plan.Evidence{Type: plan.EvidenceReceipt, Receipts: []string{"email_sent"}}
	notify.Until, notify.MaxIterations = "MAIL SENT", 4
	fx.adopt(notify, ph("other", "notify"))

	// notify/1 sent the email, then the harness died.
	emit := func(typ, phaseID string, data any) {
		t.Helper()
		e := event.New(typ, data)
		e.PhaseID, e.Attempt = phaseID, 1
		if err := fx.sink.Emit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	emit(event.PhaseStarted, "notify", event.PhaseData{Title: "Title of notify"})
	sent := event.ReceiptData{Type: "email_sent", Key: "email:abc", Details: json.RawMessage(`{"message_id":"<m1@example.com>","to":"boss@example.com"}`)}
	emit(event.ReceiptRecorded, "notify", sent)
	emit(event.ReceiptRecorded, "other", event.ReceiptData{Type: "slack_message_sent", Key: "slack:1", Details: json.RawMessage(`{"ts":"1.2"}`)})
	emit(event.CheckpointCreated, "notify", event.CheckpointData{Path: "draft.md", Existed: false})
	if _, err := fx.db.AddIntent(ctx, store.Receipt{Key: "email:pending", RunID: testRunID, PhaseID: "notify", Attempt: 1, Tool: "send_email", Type: "email_sent", Acked: true}); err != nil {
		t.Fatal(err)
	}

	fx.restart()
	if out := fx.execute(ctx); out.Status != event.StatusCompleted {
		t.Fatalf("outcome = %+v", out)
	}
	if got, want := fx.spawn.started(), []string{"notify/2", "other/1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("children started = %v, want %v", got, want)
	}

	c := fx.spawn.call(t, "notify", 2)
	cfg := c.Cfg
	if want := filepath.Join(fx.runDir, "logs", "notify-2.log"); cfg.LogPath != want {
		t.Errorf("LogPath = %q, want %q", cfg.LogPath, want)
	}
	if cfg.Timeout != 7*time.Minute || cfg.Exe != "/opt/agent/bin/agent" || !reflect.DeepEqual(cfg.Env, []string{"OPENAI_API_KEY=sk-test"}) ||
		cfg.HeartbeatTimeout != 3*time.Second || cfg.Grace != time.Second || cfg.OnEvent == nil {
		t.Errorf("adapter config = %+v", cfg)
	}

	spec := c.Spec
	root, err := filepath.EvalSymlinks(fx.ws)
	if err != nil {
		t.Fatal(err)
	}
	wantModel := model
	wantModel.Scope = "notify/2"
	if spec.RunID != testRunID || spec.SessionID != "sess-1" || spec.Workspace != root || spec.Mode != adapter.ModePhase ||
		spec.Model != wantModel || !reflect.DeepEqual(spec.Tools, []string{"read_file", "send_email"}) ||
		spec.MaxTurns != 12 || spec.ContextBudget != 50000 || spec.Until != "MAIL SENT" || spec.MaxIterations != 4 {
		t.Errorf("spec = %+v", spec)
	}
	if err := spec.Validate(); err != nil {
		t.Errorf("spec does not validate: %v", err)
	}
	// A file the run already snapshotted is not snapshotted again, so its
	// first checkpoint keeps the pre-run state.
	if !reflect.DeepEqual(spec.Checkpointed, []string{"draft.md"}) {
		t.Errorf("spec.Checkpointed = %v, want [draft.md]", spec.Checkpointed)
	}
	if len(spec.Receipts) != 1 || spec.Receipts[0].Key != sent.Key || spec.Receipts[0].Type != sent.Type {
		t.Fatalf("spec receipts = %+v, want only the done email of this phase", spec.Receipts)
	}
	var gotDetails, wantDetails any
	if json.Unmarshal(spec.Receipts[0].Details, &gotDetails) != nil || json.Unmarshal(sent.Details, &wantDetails) != nil ||
		!reflect.DeepEqual(gotDetails, wantDetails) {
		t.Errorf("receipt details = %s, want %s", spec.Receipts[0].Details, sent.Details)
	}
	mustContain(t, "notify/2 prompt", spec.Prompt, "Side effects already done in this phase", "email_sent (done)")
	if got := fx.spawn.call(t, "other", 1).Spec; got.Model.Scope != "other/1" || len(got.Receipts) != 1 || got.Receipts[0].Key != "slack:1" {
		t.Errorf("other/1 scope %q, receipts %+v", got.Model.Scope, got.Receipts)
	}
}

func TestInterruptDuringVerificationDoesNotCountAgainstTheBudget(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, nil)
	check := ph("check")
	// The check says it runs, then would take longer than the test.
	check.Evidence = plan.Evidence{Type: plan.EvidenceProgrammatic, Command: "test -f done.txt || { touch checking; sleep 600; exit 1; }"}
	fx.adopt(check)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fx.spawn.ChildFunc = func(context.Context, *child) *adapter.Result {
		// The child finishes; Ctrl-C comes once the check command runs.
		go func() {
			for deadline := time.Now().Add(waitLimit); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				if _, err := os.Stat(filepath.Join(fx.ws, "checking")); err == nil {
					break
				}
			}
			cancel()
		}()
		return completed("done, I believe")
	}
	began := time.Now()
	if out := fx.execute(ctx); out.Status != event.StatusInterrupted {
		t.Fatalf("outcome = %+v, want interrupted", out)
	}
	if d := time.Since(began); d > waitLimit {
		t.Errorf("Execute took %v: the check command was not stopped", d)
	}
	if got := fx.attemptStatuses("check"); !reflect.DeepEqual(got, []string{event.StatusCancelled}) {
		t.Errorf("attempts = %v, want one cancelled attempt", got)
	}
	gs, err := fx.db.Guardrails(context.Background(), testRunID, "check")
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) != 0 {
		t.Errorf("an interrupted check left guardrails: %+v", gs)
	}

	fx.restart()
	fx.spawn.ChildFunc = func(ctx context.Context, c *child) *adapter.Result {
		c.writeFile("done.txt", "ok")
		return completed("done")
	}
	if out := fx.execute(context.Background()); out.Status != event.StatusCompleted {
		t.Fatalf("resumed outcome = %+v", out)
	}
	p := fx.spawn.prompt(t, "check", 2)
	mustContain(t, "check/2 prompt", p, "Attempt 1 of 3.")
	mustNotContain(t, "check/2 prompt", p, "GUARDRAILS")
}

// An attempt whose worker went away (event.StatusLost) did not fail: it
// is recorded interrupted, counts nothing against max_attempts, and the
// phase starts again.
func TestLostAttemptDoesNotCountAgainstTheBudget(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, nil)
	fx.adopt(attempts(ph("draft"), 1))
	const reason = "worker host/12/ab running the attempt stopped answering"
	fx.spawn.ChildFunc = func(ctx context.Context, c *child) *adapter.Result {
		if c.spec.Attempt <= 2 {
			return ended(event.StatusLost, reason)
		}
		return nil
	}
	if out := fx.execute(context.Background()); out.Status != event.StatusCompleted {
		t.Fatalf("outcome = %+v, want completed: a lost attempt must not use up the phase's one attempt", out)
	}
	if got := fx.spawn.started(); !reflect.DeepEqual(got, []string{"draft/1", "draft/2", "draft/3"}) {
		t.Errorf("children started = %v", got)
	}
	if got := fx.attemptStatuses("draft"); !reflect.DeepEqual(got, []string{event.StatusInterrupted, event.StatusInterrupted, event.StatusPassed}) {
		t.Errorf("attempts = %v", got)
	}
	failed := fx.phaseData(event.PhaseFailed, "draft")
	if len(failed) != 2 || !failed[0].WillRetry || failed[0].Reason != reason {
		t.Errorf("phase.failed = %+v", failed)
	}
}
