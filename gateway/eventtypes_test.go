package gateway

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"agent/event"
	"agent/event/eventtest"
)

// The web view's stream (RunView.apply) names every run event type it
// shows; run.* endings go to its TERMINAL set; the others it leaves out,
// each for the reason given here.
func TestWebViewCoversEveryEventType(t *testing.T) {
	src, err := os.ReadFile("web/app.js")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`const TERMINAL = new Set\(\[([^\]]*)\]\)`).FindSubmatch(src)
	if m == nil {
		t.Fatal("app.js has no TERMINAL set")
	}
	var terminal []string
	for _, q := range regexp.MustCompile(`'([a-z.]+)'`).FindAllSubmatch(m[1], -1) {
		terminal = append(terminal, string(q[1]))
	}
	for _, typ := range event.Types {
		if event.IsTerminal(typ) != slices.Contains(terminal, typ) {
			t.Errorf("app.js's TERMINAL set and event.IsTerminal disagree on %s", typ)
		}
	}
	handled := append(eventtest.JSCases(t, "web/app.js", "apply"), terminal...)
	eventtest.Covers(t, "the web view (gateway/web/app.js, apply)", handled, nil)
}
