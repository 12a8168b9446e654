package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/gateway"
	"agent/gateway/api"
	"agent/llm/llmtest"
	"agent/scheduler"
	"agent/store"
)

// The web view's tests drive the page in headless Chromium, signed in
// through its form, against an in-process gateway whose runs talk to the
// scripted fake model. Screenshots go to artifacts/web/.

// webStep bounds one step of a browser test: generous, as a loaded
// machine may take many seconds to render a page in Chromium, and only a
// failing step waits it out.
const webStep = time.Minute

// browser is one headless Chromium with one tab, and every URL the tab
// asked for, so a test can check the token never went into one.
type browser struct {
	t   *testing.T
	ctx context.Context

	mu   sync.Mutex
	urls []string
}

// chromium finds the browser, or "".
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	exe := chromium()
	if exe == "" {
		t.Skip("chromium is not installed (scripts/deps.sh installs it): the web view's browser tests skip")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.WindowSize(1360, 860),
		chromedp.Flag("lang", "en-US"),
		chromedp.Env("LANG=en_US.UTF-8", "TZ=UTC"),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium's sandbox refuses to run as root
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	b := &browser{t: t, ctx: ctx}
	err := chromedp.Listen(ctx, func(ev any) {
		var u string
		switch ev := ev.(type) {
		case *network.EventRequestWillBeSent:
			u = ev.Request.URL + ev.Request.URLFragment
		case *network.EventWebSocketCreated:
			u = ev.URL
		case *page.EventFrameNavigated:
			u = ev.Frame.URL + ev.Frame.URLFragment
		default:
			return
		}
		b.mu.Lock()
		b.urls = append(b.urls, u)
		b.mu.Unlock()
	})
	if err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return b
}

// do runs steps, or fails the test with a screenshot of the page.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, webStep)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.fail(what, err)
	}
}

// until waits for a JavaScript condition to hold.
func (b *browser) until(what, cond string) {
	b.t.Helper()
	b.do(what, func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := chromedp.Poll[chromedp.Void](cond, chromedp.WithPollingInterval(25*time.Millisecond), chromedp.WithPollingTimeout(webStep))(ctx, t)
		return chromedp.Void{}, err
	})
}

func (b *browser) fail(what string, err error) {
	b.t.Helper()
	b.screenshot("failed-" + strings.ReplaceAll(b.t.Name(), "/", "-"))
	b.t.Fatalf("%s: %v", what, err)
}

// eval returns the value of a JavaScript expression; promises are awaited.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, webStep)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.fail("evaluate "+expr, err)
	}
	return v
}

// screenshot saves what the tab shows as artifacts/web/NAME.png, for a
// person to look at.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	b.capture(name, chromedp.CaptureScreenshot())
}

// pageScreenshot saves the whole page, scrolled parts included.
func (b *browser) pageScreenshot(name string) {
	b.t.Helper()
	b.capture(name, chromedp.FullScreenshot(100)) // 100: PNG
}

func (b *browser) capture(name string, shot chromedp.Action[[]byte]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, webStep)
	defer cancel()
	png, err := chromedp.Run(ctx, shot)
	if err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	dir, _ := filepath.Abs(filepath.Join(e2etest.Root(), "artifacts", "web"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s", path)
}

// tokenNeverInURL fails the test if any URL the tab visited or fetched
// carried the token (CVE-2026-25253's mistake).
func (b *browser) tokenNeverInURL(token string) {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.urls) == 0 {
		b.t.Fatal("no URL was recorded: the check would prove nothing")
	}
	for _, u := range b.urls {
		if strings.Contains(u, token) || strings.Contains(u, "token=") {
			b.t.Errorf("the token is in a URL the browser visited: %s", u)
		}
	}
}

// signIn opens the page and signs in through its form, first with a
// wrong token, which must be refused with a clear message.
func (b *browser) signIn(addr string) {
	b.t.Helper()
	b.do("open the page", chromedp.Navigate("http://"+addr+"/"), chromedp.WaitVisible(chromedp.ID("token")))
	b.do("sign in with a wrong token",
		chromedp.SendKeys(chromedp.ID("token"), "not-the-token-0123456789"),
		chromedp.Click(chromedp.ID("signin-button")),
		chromedp.WaitVisible(chromedp.ID("signin-error")))
	if msg := eval[string](b, `document.getElementById('signin-error').textContent`); !strings.Contains(msg, "wrong token") {
		b.t.Errorf("wrong token says %q", msg)
	}
	b.do("sign in",
		chromedp.SendKeys(chromedp.ID("token"), e2etest.GwToken),
		chromedp.Click(chromedp.ID("signin-button")),
		chromedp.WaitVisible(chromedp.ID("app-view")))
	b.until("connect", `document.getElementById('conn').dataset.state === 'connected'`)
	if c := eval[string](b, `document.cookie`); c != "" {
		b.t.Errorf("the page's script can read cookies %q: the session cookie must be HttpOnly", c)
	}
}

// startRun types a prompt in the page's box and starts it.
func (b *browser) startRun(prompt string, harness bool) {
	b.t.Helper()
	steps := []chromedp.Action[chromedp.Void]{chromedp.SendKeys(chromedp.ID("input"), prompt)}
	if harness {
		steps = append(steps, chromedp.Click(chromedp.ID("harness")))
	}
	steps = append(steps, chromedp.Click(chromedp.ID("start-button")))
	b.do("start a run", steps...)
}

// TestWebStreamLive: signed in through the form, a run's text appears in
// the page while the model is still streaming it; a reload resumes the
// stream after the last seq the page had, showing nothing twice; the run
// is cancelled from the page behind a confirmation. Then the page's
// connection drops, a whole run happens meanwhile, and once the page is
// back it shows that run (its tool call with the result, its end) once.
func TestWebStreamLive(t *testing.T) {
	const full = "Streaming hello from the fake model, one piece at a time, until it is stopped."
	e := e2etest.New(t,
		llmtest.Turn{Text: full, Hang: true}, // the first piece, then nothing until the run stops
		e2etest.WriteTurn("notes.txt", "first notes\n"),
		llmtest.Turn{Text: "Wrote notes.txt."},
	)
	srv, _ := e.InProcessGateway(nil)
	// The page talks to the gateway through a proxy that can cut it off.
	proxy := newCutProxy(t, srv.Addr())
	b := newBrowser(t)
	b.signIn(proxy.addr())
	b.screenshot("signed-in")

	b.startRun("say hello slowly", false)
	// The model's stream is still open (it hangs): the text seen is part
	// of it, and the run is running.
	b.until("text while streaming", `(() => {
		const a = document.querySelector('.run[data-status="running"] .assistant[data-streaming="true"]');
		return a && a.textContent.length > 0;
	})()`)
	partial := eval[string](b, `document.querySelector('.assistant').textContent`)
	if partial == full || !strings.HasPrefix(full, partial) {
		t.Fatalf("streamed text %q: want the start of %q while the stream goes on", partial, full)
	}
	b.screenshot("stream-live")

	// A reload resumes after the page's last seq, not from the start.
	b.do("reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("app-view")))
	b.until("the streamed text again", `(() => {
		const a = document.querySelectorAll('.assistant');
		return document.getElementById('stream').dataset.resumedAfter && a.length === 1 && a[0].textContent === `+jsString(partial)+`;
	})()`)
	afterReload := eval[int](b, `Number(document.getElementById('stream').dataset.resumedAfter)`)
	if afterReload == 0 {
		t.Error("after a reload the page resumed after seq 0: want the last seq it had")
	}
	if n := eval[int](b, `document.querySelectorAll('.run').length`); n != 1 {
		t.Errorf("%d run blocks after the reload, want 1", n)
	}

	b.do("cancel the run", chromedp.Click(chromedp.ID("cancel")), chromedp.WaitVisible(chromedp.ID("confirm")))
	b.do("confirm", chromedp.Click(chromedp.ID("confirm-yes")))
	b.until("the end of the run", `document.querySelector('.end[data-status="cancelled"]') !== null`)

	// Cut the page off; a run starts and ends in its session meanwhile.
	sessionID := eval[string](b, `sessionStorage.getItem('agent.selected')`)
	proxy.cut(true)
	b.until("the page sees the connection drop", `document.getElementById('conn').dataset.state !== 'connected'`)
	c := e2etest.GwDial(t, srv.Addr())
	run := e2etest.GwCall[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{SessionID: sessionID, Input: "write some notes"})
	if end := e2etest.LastFrame(e2etest.GwWait(t, c, run.RunID)); end.Event != "run.completed" {
		t.Fatalf("the run while the page was away: %s", end.Event)
	}
	proxy.cut(false)
	b.until("the missed run, once back", `document.getElementById('conn').dataset.state === 'connected' &&
		document.querySelector('.run[data-run=`+jsString(run.RunID)+`] .end[data-status="completed"]') !== null`)
	if after := eval[int](b, `Number(document.getElementById('stream').dataset.resumedAfter)`); after <= afterReload {
		t.Errorf("the reconnect resumed after seq %d: want the last seq seen before the drop (past %d)", after, afterReload)
	}
	if out := eval[string](b, `document.querySelector('.tool[data-name="write_file"][data-state="ok"] pre.output').textContent`); !strings.Contains(out, "notes.txt") {
		t.Errorf("write_file's result in the page: %q", out)
	}
	counts := eval[map[string]int](b, `({
		runs: document.querySelectorAll('.run').length,
		ends: document.querySelectorAll('.end').length,
		tools: document.querySelectorAll('.tool').length,
		finals: [...document.querySelectorAll('.assistant')].filter(a => a.textContent === 'Wrote notes.txt.').length,
	})`)
	if want := map[string]int{"runs": 2, "ends": 2, "tools": 1, "finals": 1}; !maps.Equal(counts, want) {
		t.Errorf("after the reconnect the page shows %v, want %v: nothing lost, nothing twice", counts, want)
	}
	b.screenshot("stream-done")
	b.tokenNeverInURL(e2etest.GwToken)
}

// cutProxy forwards TCP connections to a gateway, and can cut them all
// off and refuse new ones, as a dropped network does.
type cutProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]struct{}
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	t.Cleanup(func() {
		ln.Close()
		p.cut(true)
	})
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			go p.forward(in)
		}
	}()
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) forward(in net.Conn) {
	out, err := net.Dial("tcp", p.target)
	if err != nil {
		in.Close()
		return
	}
	p.mu.Lock()
	if p.down {
		p.mu.Unlock()
		in.Close()
		out.Close()
		return
	}
	p.conns[in], p.conns[out] = struct{}{}, struct{}{}
	p.mu.Unlock()
	go func() {
		_, _ = io.Copy(out, in)
		out.Close()
	}()
	_, _ = io.Copy(in, out)
	in.Close()
	p.mu.Lock()
	delete(p.conns, in)
	delete(p.conns, out)
	p.mu.Unlock()
}

// cut drops every connection and refuses new ones (true), or lets them
// through again (false).
func (p *cutProxy) cut(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}

// TestWebHarnessBoard: a harness run's phase board follows the run (a
// phase running, then every phase verified with its attempt, findings and
// artifacts), and marks a side effect whose outcome is unknown.
func TestWebHarnessBoard(t *testing.T) {
	planArgs := json.RawMessage(`{"objective":"A signed greeting","phases":[
		{"id":"greet","title":"Greet","instructions":"Write hello.txt.","evidence":{"type":"artifact","artifacts":["hello.txt"]}},
		{"id":"sign","title":"Sign it","instructions":"Write signed.txt.","depends_on":["greet"],"evidence":{"type":"artifact","artifacts":["signed.txt"]}}]}`)
	slowWrite := e2etest.WriteTurn("hello.txt", "hello\n")
	greeting := make(chan struct{})
	slowWrite.Gate = greeting // held until the board has shown greet running
	turns := []llmtest.Turn{{When: e2etest.PlannerMarker, ToolCalls: []llmtest.Call{{Name: "submit_plan", Arguments: planArgs}}}}
	turns = append(turns, e2etest.ForPhase("greet", slowWrite, llmtest.Turn{Text: "hello.txt says hello."})...)
	turns = append(turns, e2etest.ForPhase("sign", e2etest.WriteTurn("signed.txt", "— the agent\n"), llmtest.Turn{Text: "Signed."})...)
	e := e2etest.New(t, turns...)
	srv, db := e.InProcessGateway(nil)
	b := newBrowser(t)
	b.signIn(srv.Addr())

	b.startRun("write a signed greeting", true)
	b.until("greet running", `document.querySelector('#phases .phase[data-phase="greet"][data-status="running"] .elapsed[data-since]') !== null &&
		document.querySelector('#phases .phase[data-phase="sign"][data-status="pending"]') !== null`)
	b.screenshot("board-running")
	close(greeting)

	b.until("every phase verified", `document.querySelectorAll('#phases .phase[data-status="completed"]').length === 2 &&
		document.querySelector('.end[data-status="completed"]') !== null`)
	greet := eval[string](b, `document.querySelector('#phases .phase[data-phase="greet"]').textContent`)
	for _, want := range []string{"attempt 1/3", "evidence: hello.txt", "#1 passed", "findings pass", "artifact hello.txt"} {
		if !strings.Contains(greet, want) {
			t.Errorf("greet on the board lacks %q: %s", want, greet)
		}
	}

	// A side effect whose outcome was lost, as a crash leaves it; the
	// board shows it when it is next read (the run's header selects it).
	runID := eval[string](b, `document.querySelector('.run').dataset.run`)
	ctx := context.Background()
	if _, err := db.AddIntent(ctx, store.Receipt{Key: "email-lost", RunID: runID, PhaseID: "sign", Attempt: 1, Tool: "send_email", Type: "email_sent"}); err != nil {
		t.Fatal(err)
	}
	if err := db.MarkReceiptUnknown(ctx, "email-lost"); err != nil {
		t.Fatal(err)
	}
	b.do("select the run", chromedp.Click(chromedp.CSS(".run-head")))
	b.until("the unknown outcome", `(document.querySelector('#phases .phase[data-phase="sign"] .receipt.unknown[data-key="email-lost"]')?.textContent || '').includes('outcome unknown')`)
	b.screenshot("board-done")

	// On a phone's screen the page is one column, and nothing is wider
	// than the screen.
	b.do("a phone's screen", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile))
	if w := eval[int](b, `document.documentElement.scrollWidth - window.innerWidth`); w > 0 {
		t.Errorf("on a phone the page is %d px wider than the screen", w)
	}
	if lefts := eval[[]int](b, `[document.getElementById('session-main'), document.querySelector('.details'), document.getElementById('sidebar')]
		.map((e) => Math.round(e.getBoundingClientRect().left))`); len(lefts) != 3 || lefts[0] != 0 || lefts[1] != 0 || lefts[2] != 0 {
		t.Errorf("on a phone the session, the run and the sessions list start at %v px: want one column", lefts)
	}
	b.pageScreenshot("phone")
	b.tokenNeverInURL(e2etest.GwToken)
}

// TestWebRewindAndJobs: the page lists a run's checkpoints; rewind asks
// first (keeping the files when told so) and then puts them back; the
// scheduled jobs show their next run in their own time zone.
func TestWebRewindAndJobs(t *testing.T) {
	e := e2etest.New(t, e2etest.WriteTurn("notes.txt", "notes\n"), llmtest.Turn{Text: "Wrote notes.txt."})
	srv, _ := e.InProcessGateway(func(c *gateway.Config) { c.Scheduler = &gateway.SchedulerConfig{} })
	c := e2etest.GwDial(t, srv.Addr())
	e2etest.GwCall[json.RawMessage](t, c, api.MethodJobCreate, api.JobCreateParams{
		Name: "morning-report", CronExpr: "0 9 * * *", Timezone: "Asia/Tokyo", Prompt: "report"})

	b := newBrowser(t)
	b.signIn(srv.Addr())
	b.until("the job", `(document.querySelector('#jobs [data-job] .next')?.textContent || '').includes('GMT+9')`)
	if next := eval[string](b, `document.querySelector('#jobs [data-job] .next').textContent`); !strings.Contains(next, "09:00") {
		t.Errorf("the job's next run %q: want 09:00 in Tokyo time", next)
	}

	b.startRun("write notes", false)
	b.until("the run's checkpoint", `document.querySelector('.end[data-status="completed"]') !== null &&
		document.querySelector('#checkpoints .checkpoint[data-number="1"] button.rewind:not([disabled])') !== null`)
	notes := filepath.Join(e.Workspace, "notes.txt")
	if _, err := os.Stat(notes); err != nil {
		t.Fatal(err)
	}

	b.do("ask to rewind", chromedp.Click(chromedp.CSS("#checkpoints button.rewind")), chromedp.WaitVisible(chromedp.ID("confirm")))
	if list := eval[string](b, `document.getElementById('confirm-list').textContent`); !strings.Contains(list, "notes.txt (remove)") {
		t.Errorf("the confirmation lists %q, want notes.txt (remove)", list)
	}
	b.screenshot("rewind-confirm")
	b.do("keep the files", chromedp.Click(chromedp.ID("confirm-no")), chromedp.WaitNotVisible(chromedp.ID("confirm")))
	if _, err := os.Stat(notes); err != nil {
		t.Fatalf("declining the rewind changed the files: %v", err)
	}

	b.do("rewind", chromedp.Click(chromedp.CSS("#checkpoints button.rewind")), chromedp.WaitVisible(chromedp.ID("confirm")),
		chromedp.Click(chromedp.ID("confirm-yes")))
	b.until("the rewind's result", `document.querySelector('#rewind-result .rewound[data-outcome="removed"][data-path="notes.txt"]') !== null &&
		[...document.querySelectorAll('.line')].some(l => l.textContent.includes('rewound to checkpoint #1'))`)
	if _, err := os.Stat(notes); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("notes.txt after the rewind: %v, want it gone (the run created it)", err)
	}
	b.screenshot("rewind-done")
	b.tokenNeverInURL(e2etest.GwToken)
}

// TestWebJobRuns: a job clicked in the page lists its runs; a run that
// job.run_now starts shows there while it runs and once it has completed,
// without a reload; its id there opens the run in its session.
func TestWebJobRuns(t *testing.T) {
	e := e2etest.New(t, e2etest.BashTurn("while [ ! -e gate ]; do sleep 0.05; done; echo through"), llmtest.Turn{Text: "Report filed."})
	srv, db := e.JobsGateway(true)
	gate := filepath.Join(e.Workspace, "gate")
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o644) }) // no loop outlives the test
	c := e2etest.GwDial(t, srv.Addr())
	// Paused, the job never fires on its own: its one run is run_now's.
	job := e2etest.GwCall[scheduler.Job](t, c, api.MethodJobCreate, api.JobCreateParams{
		Name: "nightly-report", CronExpr: "0 3 * * *", Prompt: "file the report", Paused: true})

	b := newBrowser(t)
	b.signIn(srv.Addr())
	sel := `#jobs [data-job=` + jsString(job.ID) + `]`
	b.do("open the job", chromedp.Click(chromedp.CSS(sel+" button.item")))
	b.until("no runs yet", `(document.querySelector(`+jsString(sel+" .job-runs")+`)?.textContent || '') === 'No runs yet.'`)

	e2etest.GwCall[scheduler.JobRun](t, c, api.MethodJobRunNow, api.JobParams{JobID: job.ID})
	var runID string
	e2etest.WaitFor(t, "the job's run to start", func() bool {
		runs := e2etest.JobRuns(t, db, job.ID)
		if len(runs) == 1 && runs[0].Status == event.StatusRunning {
			runID = runs[0].RunID
		}
		return runID != ""
	})
	// jobRun is true when the job lists one run, with this status and a
	// button naming the run.
	jobRun := func(status string) string {
		return `(() => {
			const li = document.querySelectorAll(` + jsString(sel+" .job-runs li") + `);
			return li.length === 1 && li[0].querySelector('.badge.s-` + status + `')?.textContent === '` + status + `' &&
				li[0].querySelector('button')?.textContent === ` + jsString(runID[:8]) + `;
		})()`
	}
	b.until("the job's run running", jobRun(event.StatusRunning))
	b.screenshot("job-run-running")

	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	b.until("the job's run completed", jobRun(event.StatusCompleted))
	if runs := e2etest.JobRuns(t, db, job.ID); len(runs) != 1 || runs[0].Status != event.StatusCompleted || runs[0].RunID != runID {
		t.Errorf("the job's runs in the store: %+v, want run %s completed", runs, runID)
	}
	b.screenshot("job-runs")

	b.do("open the run", chromedp.Click(chromedp.CSS(sel+" .job-runs li button")))
	b.until("the run in its session", `document.getElementById('run-id').title === `+jsString(runID)+` &&
		document.getElementById('session-title').textContent.includes('nightly-report') &&
		document.querySelector('.run[data-run=`+jsString(runID)+`] .end[data-status="completed"]') !== null`)
	if text := eval[string](b, `document.querySelector('.run[data-run=`+jsString(runID)+`]').textContent`); !strings.Contains(text, "Report filed.") {
		t.Errorf("the job's run in the page: %q, want its answer", text)
	}
	// The job's session, new to the page, is in the sessions list too.
	b.until("the job's session listed", `[...document.querySelectorAll('#sessions button')].some(b => b.textContent.includes('nightly-report'))`)
	b.tokenNeverInURL(e2etest.GwToken)
}

// TestWebInterrupt: Interrupt stops a running run from the page; the page
// shows it interrupted and resumable, its text no longer streaming and its
// buttons gone, and the store and run.get have it interrupted.
func TestWebInterrupt(t *testing.T) {
	e := e2etest.New(t, llmtest.Turn{Text: "Thinking about the report aloud, one piece at a time, until interrupted.", Hang: true})
	srv, db := e.InProcessGateway(nil)
	b := newBrowser(t)
	b.signIn(srv.Addr())

	b.startRun("think aloud", false)
	b.until("text while streaming", `(() => {
		const a = document.querySelector('.run[data-status="running"] .assistant[data-streaming="true"]');
		return a && a.textContent.length > 0 && !document.getElementById('run-actions').hidden;
	})()`)
	runID := eval[string](b, `document.querySelector('.run').dataset.run`)

	b.do("interrupt", chromedp.Click(chromedp.ID("interrupt")))
	// Interrupting is resumable: the page need not ask, but if it does,
	// the answer is yes.
	b.until("a question or the end", `document.getElementById('confirm').open || document.querySelector('.end') !== null`)
	if eval[bool](b, `document.getElementById('confirm').open`) {
		b.do("confirm", chromedp.Click(chromedp.ID("confirm-yes")))
	}
	run := `.run[data-run=` + jsString(runID) + `]`
	b.until("the run interrupted", `document.querySelector(`+jsString(run+`[data-status="interrupted"] .end[data-status="interrupted"]`)+`) !== null &&
		document.getElementById('run-status').textContent === 'interrupted' &&
		document.getElementById('run-actions').hidden`)
	if end := eval[string](b, `document.querySelector(`+jsString(run+" .end")+`).textContent`); !strings.Contains(end, "resume") {
		t.Errorf("the run's end says %q: want it to say the run can be resumed", end)
	}
	if n := eval[int](b, `document.querySelectorAll('.assistant[data-streaming="true"]').length`); n != 0 {
		t.Errorf("%d texts still streaming after the interrupt", n)
	}
	b.screenshot("interrupted")

	row, err := db.GetRun(context.Background(), runID)
	if err != nil || row.Status != event.StatusInterrupted || row.Reason != event.ReasonInterrupted {
		t.Errorf("the run in the store: %+v %v, want interrupted", row, err)
	}
	c := e2etest.GwDial(t, srv.Addr())
	if info := e2etest.GwCall[api.RunInfo](t, c, api.MethodRunGet, api.RunParams{RunID: runID}); info.Status != event.StatusInterrupted || info.Reason != event.ReasonInterrupted {
		t.Errorf("run.get: status %s reason %s, want interrupted", info.Status, info.Reason)
	}
	b.tokenNeverInURL(e2etest.GwToken)
}

// TestWebRefusals: without the cookie the API and /ws refuse the page; a
// page of another origin on the same host, whose requests carry the
// SameSite=Strict cookie (ports do not make a site), can neither start a
// run nor open /ws; sign-out ends the session.
func TestWebRefusals(t *testing.T) {
	e := e2etest.New(t)
	srv, _ := e.InProcessGateway(nil)
	addr := srv.Addr()
	b := newBrowser(t)

	b.do("open the page", chromedp.Navigate("http://"+addr+"/"), chromedp.WaitVisible(chromedp.ID("token")))
	b.screenshot("signin")
	if code := eval[int](b, `fetch('/v1/sessions').then(r => r.status)`); code != http.StatusUnauthorized {
		t.Errorf("the API without the cookie: %d, want 401", code)
	}
	if got := eval[string](b, wsProbe()); !strings.Contains(got, "unauthorized") {
		t.Errorf("/ws without the cookie: %s, want unauthorized", got)
	}

	b.signIn(addr)
	if code := eval[int](b, `fetch('/v1/sessions').then(r => r.status)`); code != http.StatusOK {
		t.Errorf("the API with the cookie: %d, want 200", code)
	}
	if got := eval[string](b, wsProbe()); !strings.Contains(got, `"ok":true`) {
		t.Errorf("/ws with the cookie: %s, want connected", got)
	}

	// Another origin: a page on another port of 127.0.0.1.
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><title>evil</title><script>
window.results = {};
const gw = %q;
fetch('http://' + gw + '/v1/runs', {method: 'POST', mode: 'no-cors', credentials: 'include',
  headers: {'Content-Type': 'text/plain'}, body: JSON.stringify({input: 'pwned'})})
  .then(() => { results.post = 'sent'; }, (e) => { results.post = 'error'; });
`+wsProbeBody("'ws://' + gw + '/ws'", "results.ws = r;")+`
</script>`, addr)
	}))
	defer evil.Close()
	b.do("visit another site", chromedp.Navigate(evil.URL))
	b.until("its attempts", `window.results && results.post && results.ws`)
	if got := eval[string](b, `results.ws`); !strings.Contains(got, "closed before open") {
		t.Errorf("another origin's /ws: %s, want refused", got)
	}
	var list api.SessionList
	e2etest.HTTPJSON(t, "GET", "http://"+addr+"/v1/sessions?include_jobs=true", "", &list)
	if len(list.Sessions) != 0 {
		t.Errorf("another origin's POST /v1/runs created %d sessions", len(list.Sessions))
	}

	// Back on the page, still signed in; sign out ends the session.
	b.do("come back", chromedp.Navigate("http://"+addr+"/"), chromedp.WaitVisible(chromedp.ID("app-view")))
	b.do("sign out", chromedp.Click(chromedp.ID("signout")), chromedp.WaitVisible(chromedp.ID("signin-note")))
	if code := eval[int](b, `fetch('/v1/sessions').then(r => r.status)`); code != http.StatusUnauthorized {
		t.Errorf("the API after sign-out: %d, want 401", code)
	}
	b.screenshot("signed-out")
	b.tokenNeverInURL(e2etest.GwToken)
}

// wsProbe is a JavaScript promise: open /ws, send connect with no token,
// and resolve to the first answer, or to how the connection closed.
func wsProbe() string {
	return `new Promise((resolve) => {` + wsProbeBody("'ws://' + location.host + '/ws'", "resolve(r);") + `})`
}

func wsProbeBody(urlExpr, done string) string {
	return `(() => {
  let opened = false, finished = false;
  const end = (r) => { if (!finished) { finished = true; ` + done + ` } };
  const ws = new WebSocket(` + urlExpr + `);
  ws.onopen = () => { opened = true; ws.send(JSON.stringify({type: 'req', id: '1', method: 'connect', params: {protocol: 1}})); };
  ws.onmessage = (m) => { end(m.data); ws.close(); };
  ws.onclose = (c) => end(opened ? 'closed ' + c.code : 'closed before open');
})();`
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	data, _ := json.Marshal(s)
	return string(data)
}

// TestWebHostileContent: what a model (or a tool, or a prompt) writes is
// shown as text: markup in a reply, a tool's arguments and its output
// neither runs nor becomes elements of the page.
func TestWebHostileContent(t *testing.T) {
	const hostile = `<img src=x onerror="window.pwned=1"><script>window.pwned=2</script><a href="javascript:window.pwned=3">x</a>`
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("write_file", `{"path":"x.html","content":`+jsString(hostile)+`}`)}},
		llmtest.Turn{Text: "Done: " + hostile},
	)
	srv, _ := e.InProcessGateway(nil)
	b := newBrowser(t)
	b.signIn(srv.Addr())
	b.startRun("write "+hostile, false)
	b.until("the run completed", `document.querySelector('.end[data-status="completed"]') !== null`)
	if pwned := eval[bool](b, `window.pwned !== undefined`); pwned {
		t.Errorf("markup from the run ran in the page (window.pwned = %v)", eval[any](b, `window.pwned`))
	}
	if n := eval[int](b, `document.querySelectorAll('main img, main script, main a[href^="javascript"], #app-view img:not([src^="data:"]), #app-view script').length`); n != 0 {
		t.Errorf("markup from the run became %d elements of the page", n)
	}
	if text := eval[string](b, `document.querySelector('.run').textContent`); !strings.Contains(text, "Done: <img src=x") {
		t.Errorf("the reply is not shown as text: %q", text)
	}
	b.screenshot("hostile-content")
	b.tokenNeverInURL(e2etest.GwToken)
}

// TestWebLocalSession: agent chat's local session in the same store shows
// in the list marked as the chat's, and the gateway refuses a run in it
// (the chat keeps its sequence), naming how to go on in it.
func TestWebLocalSession(t *testing.T) {
	e := e2etest.New(t)
	srv, db := e.InProcessGateway(nil)
	local := &store.Session{ID: "5e55a10c-0000-4000-8000-000000000001", Title: "a chat at the terminal", Local: true}
	if err := db.CreateSession(context.Background(), local); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t)
	b.signIn(srv.Addr())
	b.until("the local session, marked", `[...document.querySelectorAll('#sessions [data-session]')].some(
		(el) => el.textContent.includes('a chat at the terminal') && el.textContent.includes('agent chat’s'))`)
	c := e2etest.GwDial(t, srv.Addr())
	err := c.Call(context.Background(), api.MethodRunStart, api.RunStartParams{SessionID: local.ID, Input: "hello"}, nil)
	var apiErr *api.Error
	if !errors.As(err, &apiErr) || apiErr.Code != api.CodeConflict || !strings.Contains(apiErr.Message, "agent chat --session "+local.ID) {
		t.Errorf("run.start in a local session: %v; want a conflict naming agent chat --session", err)
	}
}
