package web

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"agent/e2e/internal/e2etest"
	"agent/llm/llmtest"
)

// consoleLog records what the tab's console shows: its messages, and the
// errors the browser logs itself (a refused request, say).
type consoleLog struct {
	mu    sync.Mutex
	lines []string
	coded map[string]string // a file of the page's: its Content-Encoding, as first sent
}

func (b *browser) console() *consoleLog {
	b.t.Helper()
	l := &consoleLog{coded: map[string]string{}}
	err := chromedp.Listen(b.ctx, func(ev any) {
		var line string
		switch ev := ev.(type) {
		case *network.EventResponseReceived:
			name := ev.Response.URL[strings.LastIndex(ev.Response.URL, "/")+1:]
			l.mu.Lock()
			defer l.mu.Unlock()
			if _, seen := l.coded[name]; !seen && ev.Response.Status == 200 {
				l.coded[name] = ""
				for k, v := range ev.Response.Headers {
					if strings.EqualFold(k, "Content-Encoding") {
						l.coded[name] = fmt.Sprint(v)
					}
				}
			}
			return
		case *log.EventEntryAdded:
			line = fmt.Sprintf("%s %s: %s %s", ev.Entry.Level, ev.Entry.Source, ev.Entry.Text, ev.Entry.URL)
		case *runtime.EventConsoleAPICalled:
			var args []string
			for _, a := range ev.Args {
				args = append(args, string(a.Value))
			}
			line = fmt.Sprintf("console.%s %s", ev.Type, strings.Join(args, " "))
		default:
			return
		}
		l.mu.Lock()
		l.lines = append(l.lines, line)
		l.mu.Unlock()
	})
	if err != nil {
		b.t.Fatal(err)
	}
	return l
}

func (l *consoleLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// contrastJS is a JavaScript function: the contrast ratio (WCAG 2) of an
// element's text on its background, the first opaque one behind it.
const contrastJS = `((el) => {
	const rgb = (s) => (s.match(/[\d.]+/g) || []).map(Number);
	const lum = ([r, g, b]) => [r, g, b].map((c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; })
		.reduce((s, c, i) => s + c * [0.2126, 0.7152, 0.0722][i], 0);
	let bg = null;
	for (let e = el; e && !bg; e = e.parentElement) {
		const c = rgb(getComputedStyle(e).backgroundColor);
		if (c.length === 3 || (c.length === 4 && c[3] === 1)) bg = c.slice(0, 3);
	}
	const a = lum(rgb(getComputedStyle(el).color).slice(0, 3)), b = lum(bg || [255, 255, 255]);
	return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
})`

// TestWebReview: what the independent review (axe, Lighthouse) found,
// fixed. Before sign-in the console logs nothing (no refused health
// check) and the badge says "not signed in", not "offline". Signed in,
// the page has one <main> and one <h1>, every badge's text has a contrast
// of at least 4.5:1, and its script and style came gzipped. While the
// model works on its reply, before any of its text, the run says it is
// thinking. On a phone, the session and Start run come before the list of
// sessions.
func TestWebReview(t *testing.T) {
	e := e2etest.New(t,
		llmtest.Turn{When: "ponder", Text: "Pondered.", DelayMS: 600_000}, // thinks until the run is cancelled
		llmtest.Turn{When: "hello", Text: "Hello there, streaming, until stopped.", Hang: true},
	)
	srv, _ := e.InProcessGateway(nil)
	b := newBrowser(t)
	logged := b.console()

	b.do("open the page", chromedp.Navigate("http://"+srv.Addr()+"/"), chromedp.WaitVisible(chromedp.ID("token")))
	b.until("the page settled", `document.getElementById('conn').dataset.state === 'signed-out'`)
	if badge := eval[string](b, `document.getElementById('conn').textContent`); badge != "not signed in" {
		t.Errorf("before sign-in the badge says %q, want \"not signed in\"", badge)
	}
	if n := eval[int](b, `document.querySelectorAll('main:not([hidden])').length`); n != 1 {
		t.Errorf("the sign-in page has %d visible <main>, want 1", n)
	}
	if lines := logged.all(); len(lines) != 0 {
		t.Errorf("before sign-in the console logged:\n%s", strings.Join(lines, "\n"))
	}
	b.screenshot("review-signin")

	b.signIn(srv.Addr()) // its wrong token is refused, as it should be: logged from here on
	seen := len(logged.all())
	shape := eval[map[string]int](b, `({
		mains: document.querySelectorAll('main:not([hidden])').length,
		h1s: [...document.querySelectorAll('h1')].filter((h) => h.offsetParent !== null).length,
	})`)
	if shape["mains"] != 1 || shape["h1s"] != 1 {
		t.Errorf("signed in, the page has %d visible <main> and %d visible <h1>, want 1 and 1", shape["mains"], shape["h1s"])
	}
	if ratio := eval[float64](b, contrastJS+`(document.getElementById('conn'))`); ratio < 4.5 {
		t.Errorf("the connected badge's contrast is %.2f:1, want 4.5:1", ratio)
	}
	logged.mu.Lock()
	for _, f := range []string{"app.js", "style.css"} {
		if got := logged.coded[f]; got != "gzip" {
			t.Errorf("%s came with Content-Encoding %q, want gzip", f, got)
		}
	}
	logged.mu.Unlock()

	b.startRun("ponder the question", false)
	b.until("thinking", `(() => {
		const t = document.querySelector('.run[data-status="running"] .run-body > .thinking:last-child');
		return t !== null && t.offsetParent !== null && document.querySelector('.assistant') === null;
	})()`)
	b.screenshot("review-thinking")
	for _, el := range []string{"#conn", ".badge"} {
		if bad := eval[[]string](b, `[...document.querySelectorAll('`+el+`')].filter((e) => e.offsetParent !== null && `+contrastJS+`(e) < 4.5)
			.map((e) => e.textContent + ' ' + `+contrastJS+`(e).toFixed(2))`); len(bad) != 0 {
			t.Errorf("%s with a contrast under 4.5:1: %v", el, bad)
		}
	}
	b.do("cancel it", chromedp.Click(chromedp.ID("cancel")), chromedp.WaitVisible(chromedp.ID("confirm")),
		chromedp.Click(chromedp.ID("confirm-yes")))
	b.until("no longer thinking", `document.querySelector('.end[data-status="cancelled"]') !== null && document.querySelector('.thinking') === null`)

	b.startRun("say hello", false)
	b.until("its text, and no thinking", `(document.querySelector('.run[data-status="running"] .assistant')?.textContent || '').length > 0 &&
		document.querySelector('.thinking') === null`)
	for _, el := range []string{".badge"} {
		if bad := eval[[]string](b, `[...document.querySelectorAll('`+el+`')].filter((e) => e.offsetParent !== null && `+contrastJS+`(e) < 4.5)
			.map((e) => e.textContent + ' ' + `+contrastJS+`(e).toFixed(2))`); len(bad) != 0 {
			t.Errorf("%s with a contrast under 4.5:1: %v", el, bad)
		}
	}

	// A phone: the session, its stream and Start run first, the list of
	// sessions after them.
	b.do("a phone's screen", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile))
	order := eval[map[string]float64](b, `(() => {
		const top = (el) => el.getBoundingClientRect().top + window.scrollY;
		return { stream: top(document.getElementById('stream')), start: top(document.getElementById('start')),
			sessions: top(document.getElementById('sidebar')), screen: window.innerHeight,
			wider: document.documentElement.scrollWidth - window.innerWidth };
	})()`)
	if order["stream"] >= order["sessions"] || order["start"] >= order["sessions"] {
		t.Errorf("on a phone the stream (at %.0f px) and Start run (%.0f) come after the sessions (%.0f)", order["stream"], order["start"], order["sessions"])
	}
	if order["stream"] > order["screen"]/2 {
		t.Errorf("on a phone the stream starts at %.0f px of a %.0f px screen", order["stream"], order["screen"])
	}
	if order["wider"] > 0 {
		t.Errorf("on a phone the page is %.0f px wider than the screen", order["wider"])
	}
	b.pageScreenshot("review-phone")
	b.do("cancel it", chromedp.Click(chromedp.ID("cancel")), chromedp.WaitVisible(chromedp.ID("confirm")),
		chromedp.Click(chromedp.ID("confirm-yes")))
	b.until("cancelled", `document.querySelectorAll('.end[data-status="cancelled"]').length === 2`)
	if lines := logged.all()[seen:]; len(lines) != 0 {
		t.Errorf("signed in, the console logged:\n%s", strings.Join(lines, "\n"))
	}
	b.tokenNeverInURL(e2etest.GwToken)
}
