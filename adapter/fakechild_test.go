package adapter

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"agent/event"
)

// The test binary is its own fake runner: Run re-executes it with
// argv[0] "agent", and ADAPTER_FAKE_CHILD names the behaviour.
const (
	envBehaviour = "ADAPTER_FAKE_CHILD"
	envDir       = "ADAPTER_FAKE_DIR" // where a behaviour leaves files for the test
)

func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == "agent" && os.Getenv(envBehaviour) != "" {
		os.Exit(fakeChild(os.Getenv(envBehaviour)))
	}
	os.Exit(m.Run())
}

type fake struct {
	in    *bufio.Reader
	enc   *event.Encoder
	dir   string
	token string // the open call's, as the parent gave it
	// tokens are the open calls' tokens, for a reply's task calls, which
	// are open together.
	tokens map[string]string
}

var fakeChildren = map[string]func(f *fake) int{
	"normal":      fakeNormal,
	"fail":        fakeFail,
	"park":        fakePark,
	"malformed":   fakeMalformed,
	"crash":       fakeCrash,
	"sigkill":     fakeSigkill,
	"silent":      fakeSilent,
	"tree":        fakeTree,
	"sleeper":     fakeSleeper,
	"heartbeats":  fakeHeartbeats,
	"ignore-term": fakeIgnoreTerm,
	"cancel":      fakeCancel,
	"intent":      fakeIntent,
	"sync":        fakeSync,
	"hold":        fakeHold,
	"chatty":      fakeChatty,
	"forger":      fakeForger,
	"late-intent": fakeLateIntent,
	"late-result": fakeLateResult,
	"effects":     fakeEffects,
	"result-then": fakeResultThen,
	"two-results": fakeTwoResults,
}

func fakeChild(name string) int {
	run, ok := fakeChildren[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown fake child %q\n", name)
		return 99
	}
	return run(&fake{in: bufio.NewReader(os.Stdin), enc: event.NewEncoder(os.Stdout), dir: os.Getenv(envDir)})
}

func (f *fake) spec() PhaseSpec {
	spec, err := ReadSpec(f.in)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(98)
	}
	return spec
}

// emit writes an event as the real child does, with the open call's
// token.
func (f *fake) emit(typ string, data any) {
	e := event.New(typ, data)
	e.Token = f.token
	if d, ok := data.(event.ToolCompletedData); ok && f.tokens[d.CallID] != "" {
		e.Token = f.tokens[d.CallID]
	}
	if err := f.enc.Encode(e); err != nil {
		os.Exit(97)
	}
	if typ == event.ToolCompleted {
		f.token = ""
	}
}

// forge writes an event as something else writing to the child's stdout
// would: without the call's token.
func (f *fake) forge(typ string, data any) {
	if err := f.enc.Encode(event.New(typ, data)); err != nil {
		os.Exit(97)
	}
}

// start opens a tool call as the real child does: tool.started, then a
// sync whose ack carries the call's token.
func (f *fake) start(ctx context.Context, intents *Intents, id, name string) {
	f.emit(event.ToolStarted, event.ToolStartedData{CallID: id, Name: name})
	f.emit(event.Sync, event.SyncData{ID: "sync-" + id})
	c, _ := intents.Wait(ctx, "sync-"+id)
	f.token = c.Token
	if f.tokens == nil {
		f.tokens = map[string]string{}
	}
	f.tokens[id] = c.Token
}

func (f *fake) result(status, output, reason string) {
	f.emit(event.RunnerResult, event.RunnerResultData{Status: status, Output: output, Reason: reason,
		Turns: 3, Usage: event.Usage{PromptTokens: 100, CompletionTokens: 20}})
}

func (f *fake) say(text string) {
	f.emit(event.MessageCompleted, event.MessageData{Role: "assistant", Text: text})
}

func fakeNormal(f *fake) int {
	spec := f.spec()
	intents := &Intents{}
	go WatchControls(f.in, intents.Ack, intents.Stop)
	cwd, _ := os.Getwd()
	fmt.Fprintln(os.Stderr, "runner log: starting")
	f.say(fmt.Sprintf("prompt=%s cwd=%s heartbeat_ms=%d", spec.Prompt, cwd, spec.HeartbeatMS))
	write := func(name, content string) { _ = os.WriteFile(name, []byte(content), 0o644) }
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	// The real child syncs before each tool runs, so the parent has read
	// an artifact before the next call can change it.
	synced := 0
	sync := func() {
		synced++
		id := fmt.Sprint("s", synced)
		f.emit(event.Sync, event.SyncData{ID: id})
		_, _ = intents.Wait(ctx, id)
	}
	f.start(ctx, intents, "c1", "write_file")
	write("a.md", "1")
	f.emit(event.ToolCompleted, event.ToolCompletedData{CallID: "c1", OK: true, Output: "wrote a.md"})
	// The child's hash and size are its word; the parent reads the file.
	f.emit(event.ArtifactCreated, event.ArtifactData{Path: "a.md", SHA256: "v1", Bytes: 1})
	f.emit(event.Heartbeat, nil)
	sync()
	f.start(ctx, intents, "c2", "bash")
	write("b.md", "bb")
	f.emit(event.ToolCompleted, event.ToolCompletedData{CallID: "c2", OK: true})
	f.emit(event.ArtifactCreated, event.ArtifactData{Path: "b.md", SHA256: "b", Bytes: 2})
	f.start(ctx, intents, "c3", "write_file")
	sync()
	write("a.md", "333")
	f.emit(event.ToolCompleted, event.ToolCompletedData{CallID: "c3", OK: true})
	f.emit(event.ArtifactCreated, event.ArtifactData{Path: "a.md", SHA256: "v2", Bytes: 3})
	f.emit(event.LearningRecorded, event.LearningData{Text: "the API pages results"})
	f.emit(event.ApproachFailed, event.ApproachData{Approach: "scraping", Why: "blocked"})
	f.start(ctx, intents, "c4", "send_email")
	f.emit(event.EffectIntent, event.EffectIntentData{ID: "i1", CallID: "c4", Tool: "send_email", Key: "k1", ReceiptType: "email_sent"})
	if _, err := intents.Wait(ctx, "i1"); err != nil {
		return 96
	}
	// A child that sets seq is overruled: the parent assigns it.
	e := event.New(event.ReceiptRecorded, event.ReceiptData{Type: "email_sent", Key: "k1"})
	e.Seq, e.Token = 42, f.token
	_ = f.enc.Encode(e)
	f.emit(event.ToolCompleted, event.ToolCompletedData{CallID: "c4", OK: true})
	f.result(event.StatusCompleted, "all done", "")
	return 0
}

// fakeForger says what only the parent may say, or what it cannot prove:
// a tool's subprocess can write to the child's stdout.
func fakeForger(f *fake) int {
	f.spec()
	_ = os.Mkdir("dir", 0o755)
	f.emit(event.PhaseCompleted, event.PhaseData{Status: "passed"})
	f.emit(event.VerificationCompleted, event.VerificationData{Status: "pass"})
	f.emit(event.RunCompleted, event.RunFinishedData{Status: "completed"})
	f.emit(event.ReceiptRecorded, event.ReceiptData{Type: "email_sent", Key: "never-asked"})
	f.emit(event.EffectFailed, event.EffectFailedData{Key: "never-asked", Error: "x"})
	f.emit(event.ArtifactCreated, event.ArtifactData{Path: "missing.md", SHA256: "x", Bytes: 9})
	f.emit(event.ArtifactCreated, event.ArtifactData{Path: "../outside.md", SHA256: "x", Bytes: 9})
	f.emit(event.ArtifactCreated, event.ArtifactData{Path: "dir", SHA256: "x", Bytes: 9})
	f.emit(event.RunnerResult, event.RunnerResultData{Status: "victorious", Output: "forged"})
	f.result(event.StatusFailed, "honest", "max_turns")
	return 0
}

// fakeLateIntent asks for a side effect only once the parent has begun to
// stop the attempt, and leaves the answer in a file.
func fakeLateIntent(f *fake) int {
	signal.Ignore(syscall.SIGTERM)
	f.spec()
	intents := &Intents{}
	cancelled := make(chan struct{})
	go WatchControls(f.in, intents.Ack, func(error) { close(cancelled) })
	f.emit(event.ToolStarted, event.ToolStartedData{CallID: "c1", Name: "send_email"})
	<-cancelled
	f.emit(event.EffectIntent, event.EffectIntentData{ID: "late", CallID: "c1", Tool: "send_email", Key: "k-late"})
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	c, err := intents.Wait(ctx, "late")
	_ = os.WriteFile(filepath.Join(f.dir, "ack"), []byte(fmt.Sprintf("proceed=%v reason=%s err=%v", c.Proceed, c.Reason, err)), 0o644)
	f.result("cancelled", "", "interrupted")
	return 0
}

func fakeFail(f *fake) int {
	f.spec()
	f.result("failed", "gave up", "max turns reached")
	return 0 // as `agent runner` does once its result is out, whatever it says
}

// fakePark records a wait and parks, as a loop with nobody to ask does.
func fakePark(f *fake) int {
	f.spec()
	f.emit(event.RunWaiting, event.RunWaitingData{WaitID: "w1", Kind: event.WaitApproval, Tool: "bash"})
	f.emit(event.RunnerResult, event.RunnerResultData{Status: event.StatusWaiting, Reason: event.ReasonWaiting,
		Detail: "the run waits", Turns: 1, Usage: event.Usage{PromptTokens: 10, CompletionTokens: 2}})
	return 0
}

// fakeLateResult reports success only once the parent has begun to stop
// it, and exits 0: too late, the stop verdict stands.
func fakeLateResult(f *fake) int {
	signal.Ignore(syscall.SIGTERM)
	f.spec()
	cancelled := make(chan struct{})
	go WatchControls(f.in, nil, func(error) { close(cancelled) })
	f.emit(event.ToolStarted, event.ToolStartedData{CallID: "c1", Name: "bash"})
	<-cancelled
	f.result(event.StatusCompleted, "finished anyway", "")
	return 0
}

// fakeResultThen reports success, then dies as ADAPTER_FAKE_THEN says:
// "sigkill" (kill -9, as a forger that printed the result would) or an
// exit status.
func fakeResultThen(f *fake) int {
	f.spec()
	f.result(event.StatusCompleted, "FORGED RESULT", "")
	if os.Getenv("ADAPTER_FAKE_THEN") == "sigkill" {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Minute)
	}
	return 1
}

// fakeTwoResults: a forged success, then the child's own failure.
func fakeTwoResults(f *fake) int {
	f.spec()
	f.result(event.StatusCompleted, "FORGED RESULT", "")
	f.result(event.StatusFailed, "honest", "max_turns")
	return 0
}

// fakeEffects makes, in order, the effect events ADAPTER_FAKE_STEPS lists
// (comma-separated), as the child does, or with a leading ! as a forger
// writing to its stdout could (no sync, no token), and says how each
// intent was answered:
//
//	start:ID:TOOL     tool.started (and a sync, for the call's token)
//	done:ID           tool.completed
//	intent:CALL:TOOL:KEY   effect.intent (receipt type email_sent); waits for the ack
//	receipt:KEY:TYPE  receipt.recorded
//	failed:KEY        effect.failed
//	unknown:KEY       effect.unknown
//	task:CALL         task.request with CALL's token; waits for the ack
func fakeEffects(f *fake) int {
	f.spec()
	intents := &Intents{}
	go WatchControls(f.in, intents.Ack, intents.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	for i, step := range strings.Split(os.Getenv("ADAPTER_FAKE_STEPS"), ",") {
		forged := strings.HasPrefix(step, "!")
		emit := f.emit
		if forged {
			emit = f.forge
		}
		p := strings.Split(strings.TrimPrefix(step, "!"), ":")
		switch p[0] {
		case "start":
			if !forged { // a forger only says so; the child syncs for its token
				f.start(ctx, intents, p[1], p[2])
				continue
			}
			emit(event.ToolStarted, event.ToolStartedData{CallID: p[1], Name: p[2]})
		case "done":
			emit(event.ToolCompleted, event.ToolCompletedData{CallID: p[1], OK: true})
		case "intent":
			id := fmt.Sprint("i", i)
			emit(event.EffectIntent, event.EffectIntentData{ID: id, CallID: p[1], Tool: p[2], Key: p[3], ReceiptType: "email_sent"})
			c, err := intents.Wait(ctx, id)
			f.say(fmt.Sprintf("%s proceed=%v err=%v", p[3], c.Proceed, err))
		case "receipt":
			emit(event.ReceiptRecorded, event.ReceiptData{Type: p[2], Key: p[1], Details: json.RawMessage(fmt.Sprintf(`{"step":%d}`, i))})
		case "failed":
			emit(event.EffectFailed, event.EffectFailedData{Key: p[1], Error: "refused"})
		case "unknown":
			emit(event.EffectUnknown, event.EffectUnknownData{Key: p[1], Error: "connection lost"})
		case "task":
			id := fmt.Sprint("t", i)
			e := event.New(event.TaskRequest, event.TaskRequestData{ID: id, CallID: p[1], Prompt: "do " + p[1]})
			if !forged {
				e.Token = f.tokens[p[1]]
			}
			if err := f.enc.Encode(e); err != nil {
				return 97
			}
			c, err := intents.Wait(ctx, id)
			answer := "none"
			if c.Task != nil {
				answer = c.Task.Output
			}
			f.say(fmt.Sprintf("task %s answer=%s err=%v", p[1], answer, err))
		}
	}
	f.result(event.StatusCompleted, "done", "")
	return 0
}

func fakeMalformed(f *fake) int {
	f.spec()
	f.emit(event.ToolStarted, event.ToolStartedData{CallID: "c1", Name: "before"})
	w := bufio.NewWriter(os.Stdout)
	w.WriteString("garbage, not json\n")
	w.WriteString(`{"v":1,"data":{"no":"type"}}` + "\n")
	w.WriteString(strings.Repeat("x", event.MaxLine+1) + "\n")
	w.Flush()
	f.say("after")
	f.result(event.StatusCompleted, "survived", "")
	return 0
}

func fakeCrash(f *fake) int {
	f.spec()
	for i := range 200 {
		fmt.Fprintf(os.Stderr, "noise line %03d\n", i)
	}
	fmt.Fprintln(os.Stderr, "panic: boom")
	return 3
}

func fakeSigkill(f *fake) int {
	f.spec()
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	time.Sleep(time.Minute)
	return 0
}

// fakeSilent reads its spec and says nothing more.
func fakeSilent(f *fake) int {
	f.spec()
	time.Sleep(time.Hour)
	return 0
}

// fakeTree starts two grandchildren — one in its process group, one in a
// group of its own, both holding its stdout — says so and goes silent.
func fakeTree(f *fake) int {
	f.spec()
	var pids []string
	for _, ownGroup := range []bool{false, true} {
		exe, _ := os.Executable()
		cmd := exec.Command(exe)
		cmd.Args[0] = "agent"
		cmd.Env = append(os.Environ(), envBehaviour+"=sleeper")
		cmd.Stdout = os.Stdout
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: ownGroup}
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		pids = append(pids, fmt.Sprint(cmd.Process.Pid))
	}
	os.WriteFile(filepath.Join(f.dir, "pids"), []byte(strings.Join(pids, " ")), 0o644)
	f.say("started the sleepers")
	time.Sleep(time.Hour)
	return 0
}

func fakeSleeper(*fake) int {
	signal.Ignore(syscall.SIGTERM) // only SIGKILL gets rid of it
	time.Sleep(time.Minute)
	return 0
}

// fakeHeartbeats beats as often as it is told, for one and a half
// heartbeat timeouts, and says nothing else until its result.
func fakeHeartbeats(f *fake) int {
	spec := f.spec()
	for range 6 {
		time.Sleep(time.Duration(spec.HeartbeatMS) * time.Millisecond)
		f.emit(event.Heartbeat, nil)
	}
	f.result(event.StatusCompleted, "slow but alive", "")
	return 0
}

// fakeIgnoreTerm says so once it ignores SIGTERM, and then only beats.
func fakeIgnoreTerm(f *fake) int {
	signal.Ignore(syscall.SIGTERM)
	f.spec()
	f.say("SIGTERM ignored")
	for {
		time.Sleep(50 * time.Millisecond)
		f.emit(event.Heartbeat, nil)
	}
}

// fakeCancel waits for the parent's cancel line and leaves it in a file.
func fakeCancel(f *fake) int {
	signal.Ignore(syscall.SIGTERM) // so only the cancel line can end it
	f.spec()
	f.emit(event.ToolStarted, event.ToolStartedData{CallID: "c1", Name: "ready"})
	for {
		line, err := f.in.ReadString('\n')
		if err != nil {
			os.WriteFile(filepath.Join(f.dir, "control"), []byte("EOF"), 0o644)
			return 1
		}
		if strings.Contains(line, `"cancel"`) {
			os.WriteFile(filepath.Join(f.dir, "control"), []byte(line), 0o644)
			f.result("failed", "", "cancelled")
			return 0
		}
	}
}

// fakeIntent asks before two side effects and reports each answer.
func fakeIntent(f *fake) int {
	f.spec()
	intents := &Intents{}
	go WatchControls(f.in, intents.Ack, intents.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	for _, id := range []string{"i1", "i2"} {
		f.start(ctx, intents, "c-"+id, "send_email")
		f.emit(event.EffectIntent, event.EffectIntentData{ID: id, CallID: "c-" + id, Tool: "send_email", Key: "key-" + id})
		c, err := intents.Wait(ctx, id)
		receipt := ""
		if c.Receipt != nil {
			receipt = c.Receipt.Key
		}
		f.say(fmt.Sprintf("%s type=%s proceed=%v receipt=%s err=%v", id, c.Type, c.Proceed, receipt, err))
		f.emit(event.ToolCompleted, event.ToolCompletedData{CallID: "c-" + id, OK: true})
	}
	f.result(event.StatusCompleted, "asked twice", "")
	return 0
}

func fakeChatty(f *fake) int {
	f.spec()
	for {
		f.emit(event.ToolStarted, event.ToolStartedData{CallID: "c", Name: "bash"})
		time.Sleep(50 * time.Millisecond)
	}
}

// fakeSync sends a tool.started, then asks the parent to sync before it
// "runs" the tool, and says what the ack was.
// fakeHold asks the parent to hold for a wait outside a call, then within
// one, and says what each ack carried.
func fakeHold(f *fake) int {
	f.spec()
	intents := &Intents{}
	go WatchControls(f.in, intents.Ack, intents.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	hold := func(id string) {
		f.emit(event.Hold, event.HoldData{ID: id, WaitID: "w-" + id})
		c, err := intents.Wait(ctx, id)
		answer := ""
		if c.Resolution != nil {
			answer = c.Resolution.Answer
		}
		f.say(fmt.Sprintf("%s proceed=%v answer=%q reason=%q err=%v", id, c.Proceed, answer, c.Reason, err))
	}
	hold("outside")
	f.start(ctx, intents, "c1", "mcp__docs__ask")
	hold("inside")
	f.emit(event.ToolCompleted, event.ToolCompletedData{CallID: "c1", OK: true})
	f.result(event.StatusCompleted, "held", "")
	return 0
}

func fakeSync(f *fake) int {
	f.spec()
	intents := &Intents{}
	go WatchControls(f.in, intents.Ack, intents.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	f.emit(event.ToolStarted, event.ToolStartedData{CallID: "c1", Name: "bash"})
	f.emit(event.Sync, event.SyncData{ID: "s1"})
	c, err := intents.Wait(ctx, "s1")
	f.say(fmt.Sprintf("sync type=%s proceed=%v err=%v", c.Type, c.Proceed, err))
	f.result(event.StatusCompleted, "synced", "")
	return 0
}
