package e2etest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"agent/event"
	"agent/gateway/api"
	"agent/gateway/gatewaytest"
	"agent/llm/llmtest"
)

// Waits through a gateway (docs/PROTOCOL.md#waits).

// GwWaiting waits for the run.waiting frame of run runID after seq after,
// and returns it with its data.
func GwWaiting(t *testing.T, c *gatewaytest.Client, runID string, after int64) (api.EventFrame, event.RunWaitingData) {
	t.Helper()
	f := GwFrame(t, c, runID, event.RunWaiting, after)
	var w event.RunWaitingData
	if err := json.Unmarshal(f.Data, &w); err != nil {
		t.Fatal(err)
	}
	return f, w
}

// GwFrame waits up to 30 s for a frame of type typ of run runID with a
// seq after after.
func GwFrame(t *testing.T, c *gatewaytest.Client, runID, typ string, after int64) api.EventFrame {
	t.Helper()
	ctx, cancel := gatewaytest.Timeout(30 * time.Second)
	defer cancel()
	match := func(f api.EventFrame) bool { return f.RunID == runID && f.Event == typ && f.Seq > after }
	evs, err := c.WaitEvent(ctx, match)
	if err != nil {
		t.Fatalf("no %s of run %s after seq %d: %v", typ, runID, after, err)
	}
	for _, f := range evs {
		if match(f) {
			return f
		}
	}
	panic("unreachable")
}

// GwAnswer answers a wait with wait.answer and returns the gateway's
// error code ("" when it took the answer).
func GwAnswer(t *testing.T, c *gatewaytest.Client, p api.WaitAnswerParams) (api.WaitInfo, string) {
	t.Helper()
	ctx, cancel := gatewaytest.Timeout(20 * time.Second)
	defer cancel()
	var info api.WaitInfo
	err := c.Call(ctx, api.MethodWaitAnswer, p, &info)
	if err != nil && gatewaytest.ErrCode(err) == "" {
		t.Fatalf("wait.answer: %v", err)
	}
	return info, gatewaytest.ErrCode(err)
}

// ModelWasTold reports whether a request to the fake model carried text.
func ModelWasTold(srv *llmtest.Server, text string) bool {
	for _, r := range srv.Requests() {
		if strings.Contains(string(r.Body), text) {
			return true
		}
	}
	return false
}

// WaitUntil waits up to d for cond, checking every 10 ms.
func WaitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// OfFrames is the frames of evs of type typ.
func OfFrames(evs []api.EventFrame, typ string) []api.EventFrame {
	var out []api.EventFrame
	for _, f := range evs {
		if f.Event == typ {
			out = append(out, f)
		}
	}
	return out
}
