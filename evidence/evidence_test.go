package evidence

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"agent/event"
	"agent/plan"
	"agent/tools"
)

// newWorkspace returns a workspace holding files (slash path -> content;
// "dir/" makes an empty directory).
func newWorkspace(t *testing.T, files map[string]string) *tools.Workspace {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if strings.HasSuffix(name, "/") {
			mkdir(t, p)
			continue
		}
		mkdir(t, filepath.Dir(p))
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ws, err := tools.NewWorkspace(root)
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

func mkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func sha12(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:12]
}

func TestArtifact(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.md")
	if err := os.WriteFile(secret, []byte("top secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		path  string
		setup func(t *testing.T, root string)
		ok    bool
		warn  bool
		ref   string
		note  string
	}{
		{name: "present", path: "sources.md", ok: true, ref: "sources.md",
			note: "sources.md: 5 bytes, sha256 " + sha12("hello")},
		{name: "nested and normalised", path: "./out/../out/data.csv", ok: true, ref: "out/data.csv",
			note: "out/data.csv: 4 bytes, sha256 " + sha12("a,b\n")},
		{name: "absolute path inside", path: "ROOT/sources.md", ok: true, ref: "sources.md",
			note: "sources.md: 5 bytes, sha256 " + sha12("hello")},
		{name: "symlink inside the workspace", path: "link.md",
			setup: func(t *testing.T, root string) { symlink(t, "sources.md", filepath.Join(root, "link.md")) },
			ok:    true, ref: "sources.md", note: "sources.md: 5 bytes, sha256 " + sha12("hello")},
		{name: "missing", path: "report.md", ref: "report.md", note: "report.md: missing"},
		{name: "missing under a file", path: "sources.md/x", ref: "sources.md/x", note: "sources.md/x: missing"},
		{name: "empty", path: "empty.txt", ref: "empty.txt", note: "empty.txt: empty"},
		{name: "directory", path: "out", ref: "out", note: "out: is a directory"},
		{name: "fifo", path: "pipe",
			setup: func(t *testing.T, root string) {
				if err := syscall.Mkfifo(filepath.Join(root, "pipe"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			ref: "pipe", note: "pipe: is not a regular file"},
		{name: "dot dot", path: "../secret.md", ref: "../secret.md", note: "../secret.md: outside the workspace"},
		{name: "absolute path elsewhere", path: secret, ref: secret, note: secret + ": outside the workspace"},
		{name: "symlink out", path: "leak.md",
			setup: func(t *testing.T, root string) { symlink(t, secret, filepath.Join(root, "leak.md")) },
			ref:   "leak.md", note: "leak.md: outside the workspace (a symlink leads out)"},
		{name: "symlinked directory out", path: "docs/secret.md",
			setup: func(t *testing.T, root string) { symlink(t, outside, filepath.Join(root, "docs")) },
			ref:   "docs/secret.md", note: "docs/secret.md: outside the workspace (a symlink leads out)"},
		{name: "markdown that is not text", path: "report.md",
			setup: func(t *testing.T, root string) {
				if err := os.WriteFile(filepath.Join(root, "report.md"), []byte("%PDF\xff\xfe"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			ok: true, warn: true, ref: "report.md", note: "report.md: 6 bytes, sha256 " + sha12("%PDF\xff\xfe") + "; warning: not UTF-8 text"},
		{name: "binary file with a binary name", path: "chart.png",
			setup: func(t *testing.T, root string) {
				if err := os.WriteFile(filepath.Join(root, "chart.png"), []byte("\x89PNG\xff"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			ok: true, ref: "chart.png", note: "chart.png: 5 bytes, sha256 " + sha12("\x89PNG\xff")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ws := newWorkspace(t, map[string]string{"sources.md": "hello", "empty.txt": "", "out/data.csv": "a,b\n"})
			if tt.setup != nil {
				tt.setup(t, ws.Root())
			}
			in := Input{Workspace: ws, Evidence: plan.Evidence{Type: plan.EvidenceArtifact,
				Artifacts: []string{strings.ReplaceAll(tt.path, "ROOT", ws.Root())}}}
			checks := Artifact{}.Evaluate(context.Background(), in)
			if len(checks) != 1 {
				t.Fatalf("checks = %+v", checks)
			}
			want := Check{Ref: tt.ref, OK: tt.ok, Warn: tt.warn, Note: tt.note}
			if checks[0] != want {
				t.Fatalf("check =\n  %+v\nwant\n  %+v", checks[0], want)
			}
		})
	}
}

// A large text artifact is sniffed for UTF-8 only at its start, and a rune
// split by the cut does not make it "not text".
func TestArtifactLargeText(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("é", textSniff) // 2 bytes each: the sniff ends on a rune boundary
	odd := "x" + big                      // the sniff ends in the middle of an é
	ws := newWorkspace(t, map[string]string{"big.md": big, "odd.md": odd})
	in := Input{Workspace: ws, Evidence: plan.Evidence{Type: plan.EvidenceArtifact, Artifacts: []string{"big.md", "odd.md"}}}
	checks := Artifact{}.Evaluate(context.Background(), in)
	for i, body := range []string{big, odd} {
		c := checks[i]
		if !c.OK || c.Warn || !strings.Contains(c.Note, sha12(body)) {
			t.Errorf("check %d = %+v", i, c)
		}
	}
}

func TestArtifactNoWorkspace(t *testing.T) {
	t.Parallel()
	in := Input{Evidence: plan.Evidence{Type: plan.EvidenceArtifact, Artifacts: []string{"a.md"}}}
	checks := Artifact{}.Evaluate(context.Background(), in)
	if len(checks) != 1 || checks[0].OK || checks[0].Note != "a.md: no workspace to look in" {
		t.Fatalf("checks = %+v", checks)
	}
}

func TestReceipt(t *testing.T) {
	t.Parallel()
	recorded := []event.ReceiptData{
		{Type: "slack_message_sent", Key: "C1/1700000000.1", Details: json.RawMessage(`{"channel": "C1", "ts": "1700000000.1"}`)},
		{Type: "email_sent", Key: "<m1@example.com>", Details: json.RawMessage(`{"message_id":"<m1@example.com>","to":["a@example.com"]}`)},
		{Type: "email_sent", Key: "<m2@example.com>"},
	}
	tests := []struct {
		name     string
		want     []string
		receipts []event.ReceiptData
		unknown  []event.ReceiptData
		checks   []Check
	}{
		{name: "matched with details", want: []string{"slack_message_sent"}, receipts: recorded,
			checks: []Check{{Ref: "slack_message_sent:C1/1700000000.1", OK: true,
				Note: `slack_message_sent receipt recorded: key C1/1700000000.1, details {"channel":"C1","ts":"1700000000.1"}`}}},
		{name: "several of a type", want: []string{"email_sent"}, receipts: recorded,
			checks: []Check{{Ref: "email_sent:<m1@example.com>", OK: true,
				Note: `email_sent receipt recorded: key <m1@example.com>, details {"message_id":"<m1@example.com>","to":["a@example.com"]} (and 1 more)`}}},
		{name: "one missing", want: []string{"email_sent", "sms_sent"}, receipts: recorded[2:],
			checks: []Check{
				{Ref: "email_sent:<m2@example.com>", OK: true, Note: "email_sent receipt recorded: key <m2@example.com>"},
				{Ref: "sms_sent", Note: "no sms_sent receipt recorded in this phase"},
			}},
		{name: "only the given receipts count", want: []string{"email_sent"}, receipts: recorded[:1],
			checks: []Check{{Ref: "email_sent", Note: "no email_sent receipt recorded in this phase"}}},
		{name: "none recorded", want: []string{"email_sent"},
			checks: []Check{{Ref: "email_sent", Note: "no email_sent receipt recorded in this phase"}}},
		{name: "type must match exactly", want: []string{"email"}, receipts: recorded,
			checks: []Check{{Ref: "email", Note: "no email receipt recorded in this phase"}}},
		{name: "an unknown outcome is reported, not counted", want: []string{"email_sent"},
			unknown: []event.ReceiptData{{Type: "email_sent", Key: "send_email-abc"}},
			checks: []Check{{Ref: "email_sent", Note: "no email_sent receipt recorded in this phase; the email_sent effect " +
				"with key send_email-abc has an unknown outcome: the process stopped between recording the intent and recording " +
				"the result, so it was not repeated. Check whether it arrived; 'agent resume run-1 --resend-unknown' sends it again"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := Input{RunID: "run-1", Evidence: plan.Evidence{Type: plan.EvidenceReceipt, Receipts: tt.want}, Receipts: tt.receipts, Unknown: tt.unknown}
			got := Receipt{}.Evaluate(context.Background(), in)
			if len(got) != len(tt.checks) {
				t.Fatalf("checks = %+v", got)
			}
			for i := range got {
				if got[i] != tt.checks[i] {
					t.Errorf("check %d =\n  %+v\nwant\n  %+v", i, got[i], tt.checks[i])
				}
			}
		})
	}
}

func TestProgrammatic(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		command string
		timeout time.Duration
		ok      bool
		note    string // ROOT is the workspace root
	}{
		{name: "exit 0", command: "echo all good", ok: true, note: "`echo all good` exited with code 0\nall good"},
		{name: "no output", command: "true", ok: true, note: "`true` exited with code 0 (no output)"},
		{name: "runs in the workspace root", command: "pwd -P && test -f sources.md", ok: true,
			note: "`pwd -P && test -f sources.md` exited with code 0\nROOT"},
		{name: "non-zero exit", command: "echo FAIL TestX; echo boom >&2; exit 3",
			note: "`echo FAIL TestX; echo boom >&2; exit 3` exited with code 3\nFAIL TestX\nboom"},
		{name: "exit 1 without output", command: "test -f missing.md", note: "`test -f missing.md` exited with code 1 (no output)"},
		{name: "killed by a signal", command: "kill -KILL $$",
			note: "`kill -KILL $$` did not finish: terminated by signal killed (no output)"},
		// What it printed before the timeout is kept; the timeout is
		// generous, as a loaded machine may take seconds to start it.
		{name: "timeout", command: "echo started; sleep 120", timeout: 3 * time.Second,
			note: "`echo started; sleep 120` timed out after 3s; the process group was killed\nstarted"},
		{name: "empty command", command: " ", note: "no command to run"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ws := newWorkspace(t, map[string]string{"sources.md": "x"})
			in := Input{Workspace: ws, CommandTimeout: tt.timeout,
				Evidence: plan.Evidence{Type: plan.EvidenceProgrammatic, Command: tt.command}}
			start := time.Now()
			checks := Programmatic{}.Evaluate(context.Background(), in)
			if d := time.Since(start); d > patience {
				t.Fatalf("took %v", d)
			}
			want := Check{Ref: tt.command, OK: tt.ok, Note: strings.ReplaceAll(tt.note, "ROOT", ws.Root())}
			if len(checks) != 1 || checks[0] != want {
				t.Fatalf("checks =\n  %+v\nwant\n  %+v", checks, want)
			}
		})
	}
}

// Long output keeps its beginning and its end (where test failures are
// reported) within a few KB.
func TestProgrammaticOutputTruncated(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t, nil)
	in := Input{Workspace: ws, Evidence: plan.Evidence{Type: plan.EvidenceProgrammatic,
		Command: "seq 1 100000; echo LAST LINE; exit 2"}}
	c := Programmatic{}.Evaluate(context.Background(), in)[0]
	if c.OK || len(c.Note) > commandOutputMax+200 {
		t.Fatalf("ok=%v, note is %d bytes", c.OK, len(c.Note))
	}
	for _, s := range []string{"exited with code 2\n1\n2\n3\n", "truncated", "99999\n100000\nLAST LINE"} {
		if !strings.Contains(c.Note, s) {
			t.Errorf("note lacks %q:\n%s", s, c.Note)
		}
	}
}

// At the timeout the whole process group dies, including a backgrounded
// grandchild that would otherwise outlive the check.
func TestProgrammaticTimeoutKillsGroup(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t, nil)
	// A generous timeout: the command must have started its grandchild.
	in := Input{Workspace: ws, CommandTimeout: 3 * time.Second,
		Evidence: plan.Evidence{Type: plan.EvidenceProgrammatic, Command: "sleep 120 & echo $! > pid; wait"}}
	start := time.Now()
	c := Programmatic{}.Evaluate(context.Background(), in)[0]
	if d := time.Since(start); d > patience {
		t.Fatalf("took %v", d)
	}
	if c.OK || !strings.Contains(c.Note, "timed out after 3s; the process group was killed") {
		t.Fatalf("check = %+v", c)
	}
	b, err := os.ReadFile(filepath.Join(ws.Root(), "pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
}

func TestProgrammaticCancelled(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	// Cancelled once the command runs.
	go func() {
		for deadline := time.Now().Add(patience); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(ws.Root(), "started")); err == nil {
				break
			}
		}
		cancel()
	}()
	in := Input{Workspace: ws, Evidence: plan.Evidence{Type: plan.EvidenceProgrammatic, Command: "touch started; sleep 120"}}
	c := Programmatic{}.Evaluate(ctx, in)[0]
	if c.OK || c.Note != "`touch started; sleep 120` was cancelled; the process group was killed (no output)" {
		t.Fatalf("check = %+v", c)
	}
}

// processGone reports whether pid no longer runs. Zombies count as gone:
// the test's PID 1 may not reap orphans.
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return os.IsNotExist(err)
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] == "Z"
}

// patience bounds a wait for what a command does: long, as a loaded
// machine may take seconds to start or stop a process, and only a
// failing test waits it out.
const patience = time.Minute

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !processGone(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("process %d survived", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// evaluatorFunc is a fake Evaluator.
type evaluatorFunc func(ctx context.Context, in Input) []Check

func (f evaluatorFunc) Evaluate(ctx context.Context, in Input) []Check { return f(ctx, in) }

func TestComposite(t *testing.T) {
	t.Parallel()
	one := evaluatorFunc(func(context.Context, Input) []Check { return []Check{{Ref: "a", OK: true}} })
	two := evaluatorFunc(func(context.Context, Input) []Check { return []Check{{Ref: "b"}, {Ref: "c", OK: true}} })
	got := Composite{one, Composite{}, two}.Evaluate(context.Background(), Input{})
	want := []Check{{Ref: "a", OK: true}, {Ref: "b"}, {Ref: "c", OK: true}}
	if len(got) != len(want) {
		t.Fatalf("checks = %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("check %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestFor(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{plan.EvidenceArtifact, plan.EvidenceReceipt, plan.EvidenceHybrid, plan.EvidenceProgrammatic, plan.EvidenceNone} {
		if e, err := For(typ); err != nil || e == nil {
			t.Errorf("For(%q) = %v, %v", typ, e, err)
		}
	}
	if _, err := For("vibes"); err == nil || err.Error() != `unknown evidence type "vibes"` {
		t.Errorf("For(vibes) error = %v", err)
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	receipts := []event.ReceiptData{{Type: "email_sent", Key: "m1"}}
	tests := []struct {
		name     string
		evidence plan.Evidence
		status   string
		refs     []string
		notes    []string
		reasons  []string
	}{
		{name: "artifact pass", evidence: plan.Evidence{Type: "artifact", Artifacts: []string{"a.md", "b.md"}},
			status: "pass", refs: []string{"a.md", "b.md"},
			notes: []string{"pass: a.md: 1 bytes, sha256 " + sha12("a"), "pass: b.md: 1 bytes, sha256 " + sha12("b")}},
		{name: "artifact fail", evidence: plan.Evidence{Type: "artifact", Artifacts: []string{"a.md", "c.md"}},
			status: "fail", refs: []string{"a.md", "c.md"},
			notes:   []string{"pass: a.md: 1 bytes, sha256 " + sha12("a"), "fail: c.md: missing"},
			reasons: []string{"c.md: missing"}},
		{name: "artifact warn", evidence: plan.Evidence{Type: "artifact", Artifacts: []string{"a.md", "bin.md"}},
			status: "warn", refs: []string{"a.md", "bin.md"},
			notes: []string{"pass: a.md: 1 bytes, sha256 " + sha12("a"), "warn: bin.md: 1 bytes, sha256 " + sha12("\xff") + "; warning: not UTF-8 text"}},
		{name: "failure beats warning", evidence: plan.Evidence{Type: "artifact", Artifacts: []string{"bin.md", "c.md"}},
			status: "fail", refs: []string{"bin.md", "c.md"},
			notes:   []string{"warn: bin.md: 1 bytes, sha256 " + sha12("\xff") + "; warning: not UTF-8 text", "fail: c.md: missing"},
			reasons: []string{"c.md: missing"}},
		{name: "receipt pass", evidence: plan.Evidence{Type: "receipt", Receipts: []string{"email_sent"}},
			status: "pass", refs: []string{"email_sent:m1"}, notes: []string{"pass: email_sent receipt recorded: key m1"}},
		{name: "receipt fail", evidence: plan.Evidence{Type: "receipt", Receipts: []string{"slack_message_sent"}},
			status: "fail", refs: []string{"slack_message_sent"},
			notes:   []string{"fail: no slack_message_sent receipt recorded in this phase"},
			reasons: []string{"no slack_message_sent receipt recorded in this phase"}},
		{name: "hybrid pass", evidence: plan.Evidence{Type: "hybrid", Artifacts: []string{"a.md"}, Receipts: []string{"email_sent"}},
			status: "pass", refs: []string{"a.md", "email_sent:m1"},
			notes: []string{"pass: a.md: 1 bytes, sha256 " + sha12("a"), "pass: email_sent receipt recorded: key m1"}},
		{name: "hybrid missing receipt", evidence: plan.Evidence{Type: "hybrid", Artifacts: []string{"a.md"}, Receipts: []string{"slack_message_sent"}},
			status: "fail", refs: []string{"a.md", "slack_message_sent"},
			notes:   []string{"pass: a.md: 1 bytes, sha256 " + sha12("a"), "fail: no slack_message_sent receipt recorded in this phase"},
			reasons: []string{"no slack_message_sent receipt recorded in this phase"}},
		{name: "hybrid missing artifact", evidence: plan.Evidence{Type: "hybrid", Artifacts: []string{"c.md"}, Receipts: []string{"email_sent"}},
			status: "fail", refs: []string{"c.md", "email_sent:m1"},
			notes:   []string{"fail: c.md: missing", "pass: email_sent receipt recorded: key m1"},
			reasons: []string{"c.md: missing"}},
		{name: "programmatic pass", evidence: plan.Evidence{Type: "programmatic", Command: "test -s a.md"},
			status: "pass", refs: []string{"test -s a.md"}, notes: []string{"pass: `test -s a.md` exited with code 0 (no output)"}},
		{name: "programmatic fail", evidence: plan.Evidence{Type: "programmatic", Command: "echo nope; exit 4"},
			status: "fail", refs: []string{"echo nope; exit 4"},
			notes:   []string{"fail: `echo nope; exit 4` exited with code 4\nnope"},
			reasons: []string{"`echo nope; exit 4` exited with code 4\nnope"}},
		{name: "none", evidence: plan.Evidence{Type: "none"},
			status: "pass", refs: []string{}, notes: []string{"pass: no evidence required"}},
		{name: "unknown type", evidence: plan.Evidence{Type: "vibes"},
			status: "fail", refs: []string{"vibes"}, notes: []string{`fail: unknown evidence type "vibes"`},
			reasons: []string{`unknown evidence type "vibes"`}},
		{name: "nothing listed", evidence: plan.Evidence{Type: "artifact"},
			status: "fail", refs: []string{}, notes: []string{"fail: artifact evidence lists nothing to check"},
			reasons: []string{"artifact evidence lists nothing to check"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ws := newWorkspace(t, map[string]string{"a.md": "a", "b.md": "b", "bin.md": "\xff"})
			in := Input{RunID: "0123456789abcdef", PhaseID: "gather", Attempt: 2, Workspace: ws,
				Evidence: tt.evidence, Receipts: receipts}
			f := Verify(context.Background(), in)
			if f.Status != tt.status {
				t.Errorf("status = %q, want %q", f.Status, tt.status)
			}
			if f.Passed() != (tt.status != "fail") {
				t.Errorf("Passed() = %v", f.Passed())
			}
			if !equal(f.EvidenceRefs, tt.refs) {
				t.Errorf("evidence_refs = %q, want %q", f.EvidenceRefs, tt.refs)
			}
			if !equal(f.Notes, tt.notes) {
				t.Errorf("notes =\n  %q\nwant\n  %q", f.Notes, tt.notes)
			}
			if !equal(f.Reasons(), tt.reasons) {
				t.Errorf("reasons = %q, want %q", f.Reasons(), tt.reasons)
			}
			if f.TaskID != "gather" || f.TaskType != "phase" || f.EvidenceType != tt.evidence.Type ||
				f.VerifierVersion != "agent-evidence/1" || f.RunID != in.RunID || f.Attempt != 2 {
				t.Errorf("findings = %+v", f)
			}
		})
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestVerifyIdentity(t *testing.T) {
	t.Parallel()
	in := Input{RunID: "0123456789abcdef", PhaseID: "report", Attempt: 3, TaskType: "review",
		Evidence: plan.Evidence{Type: "none"}}
	before := time.Now().UTC().Truncate(time.Second)
	a := Verify(context.Background(), in)
	b := Verify(context.Background(), in)
	if !strings.HasPrefix(a.VerificationID, "ver-01234567-report-3-") || a.VerificationID == b.VerificationID {
		t.Errorf("verification ids %q and %q", a.VerificationID, b.VerificationID)
	}
	ts, err := time.Parse(time.RFC3339, a.VerificationTimestamp)
	if err != nil || !strings.HasSuffix(a.VerificationTimestamp, "Z") || ts.Before(before) || ts.After(time.Now()) {
		t.Errorf("verification_timestamp = %q (%v)", a.VerificationTimestamp, err)
	}
	if a.TaskType != "review" {
		t.Errorf("task_type = %q", a.TaskType)
	}
}

// Reasons are short even when a failed check's note carries a long log.
func TestReasonsShort(t *testing.T) {
	t.Parallel()
	long := "`make test` exited with code 2\n" + strings.Repeat("noise\n", 1000) + "FAIL TestImportant"
	f := Findings{Checks: []Check{{Ref: "a.md", OK: true, Note: "a.md: fine"}, {Ref: "make test", Note: long}}}
	r := f.Reasons()
	if len(r) != 1 || len(r[0]) > reasonMax {
		t.Fatalf("reasons = %q", r)
	}
	if !strings.HasPrefix(r[0], "`make test` exited with code 2\n") || !strings.HasSuffix(r[0], "FAIL TestImportant") {
		t.Errorf("reason = %q", r[0])
	}
}

func TestWriteFindings(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t, map[string]string{"sources.md": "hello"})
	f := Verify(context.Background(), Input{RunID: "run1", PhaseID: "gather", Attempt: 2, Workspace: ws,
		Evidence: plan.Evidence{Type: "artifact", Artifacts: []string{"sources.md", "missing.md"}}})
	dir := filepath.Join(ws.Root(), ".agent", "runs", "run1", "verification")
	path, err := WriteFindings(dir, f)
	if err != nil {
		t.Fatal(err)
	}
	if path != filepath.Join(dir, "gather-2.json") {
		t.Errorf("path = %q", path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(data), "{\n  \"verification_id\"") || !strings.HasSuffix(string(data), "}\n") {
		t.Errorf("not indented JSON:\n%s", data)
	}
	var got map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatalf("invalid JSON: %v\n%s", err, data)
	}
	want := map[string]any{
		"verification_id":        f.VerificationID,
		"task_id":                "gather",
		"task_type":              "phase",
		"evidence_type":          "artifact",
		"evidence_refs":          []any{"sources.md", "missing.md"},
		"verifier_version":       "agent-evidence/1",
		"verification_timestamp": f.VerificationTimestamp,
		"status":                 "fail",
		"notes":                  []any{"pass: sources.md: 5 bytes, sha256 " + sha12("hello"), "fail: missing.md: missing"},
		"run_id":                 "run1",
		"attempt":                float64(2),
	}
	for k, v := range want {
		if g, _ := json.Marshal(got[k]); string(g) != mustJSON(t, v) {
			t.Errorf("%s = %s, want %s", k, g, mustJSON(t, v))
		}
	}
	if checks, _ := got["checks"].([]any); len(checks) != 2 {
		t.Errorf("checks = %v", got["checks"])
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("mode = %v, %v", st.Mode(), err)
	}

	// Writing again replaces the file and leaves no temporary files behind.
	f.Status = "pass"
	if _, err := WriteFindings(dir, f); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 || entries[0].Name() != "gather-2.json" {
		t.Fatalf("dir holds %v (%v)", entries, err)
	}
	var again Findings
	if err := json.Unmarshal(readFile(t, path), &again); err != nil || again.Status != "pass" || again.VerificationID != f.VerificationID {
		t.Errorf("rewritten findings = %+v (%v)", again, err)
	}
}

// Lists are written as [] even for a hand-built Findings with nil slices.
func TestWriteFindingsEmptyLists(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path, err := WriteFindings(dir, Findings{VerificationData: event.VerificationData{TaskID: "p", Status: "pass"}, Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	data := string(readFile(t, path))
	for _, s := range []string{`"evidence_refs": []`, `"notes": []`, `"checks": []`} {
		if !strings.Contains(data, s) {
			t.Errorf("findings lack %s:\n%s", s, data)
		}
	}
}

func TestWriteFindingsRefusesBadNames(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tt := range []struct {
		id      string
		attempt int
	}{{"", 1}, {"..", 1}, {"../x", 1}, {"a/b", 1}, {"ok", 0}} {
		f := Findings{VerificationData: event.VerificationData{TaskID: tt.id}, Attempt: tt.attempt}
		if path, err := WriteFindings(dir, f); err == nil {
			t.Errorf("WriteFindings(%q, %d) wrote %s", tt.id, tt.attempt, path)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("dir holds %v", entries)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
