package llm_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"agent/llm"
	"agent/llm/llmtest"
)

// safetyNet bounds a test that would hang on a broken client; the client
// itself must finish far sooner.
const safetyNet = time.Minute

// Keep-alive comments and blank lines are no data: a server that sends
// only them, from the start or after some content, fails the attempt
// after IdleTimeout like a silent one, and the retry gets a fresh reply.
// The idle timeout is generous, since the fresh reply must not be cut: a
// loaded machine may pause a stream for a second.
func TestKeepalivesDoNotHoldTheCall(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		first llmtest.Turn
	}{
		{"only keep-alives", llmtest.Turn{Text: "late", DelayMS: 60_000, KeepaliveMS: 5}},
		{"keep-alives after some content", llmtest.Turn{Text: "stalls", Hang: true, KeepaliveMS: 5}},
		{"silence after some content", llmtest.Turn{Text: "stalls", Hang: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := llmtest.NewServer(t, llmtest.Script{Turns: []llmtest.Turn{tt.first, {Text: "fresh"}}})
			var retries []llm.RetryInfo
			c, _ := newClient(t, srv.URL(), func(cfg *llm.Config) {
				cfg.IdleTimeout = 3 * time.Second
				cfg.OnRetry = func(ri llm.RetryInfo) { retries = append(retries, ri) }
			})
			ctx, cancel := context.WithTimeout(context.Background(), safetyNet)
			defer cancel()
			start := time.Now()
			resp, err := c.Stream(ctx, simpleRequest, nil)
			if err != nil {
				t.Fatalf("stream: %v (after %v)", err, time.Since(start))
			}
			if resp.Message.Content != "fresh" {
				t.Errorf("content = %q, want the retried turn's", resp.Message.Content)
			}
			var e *llm.Error
			if len(retries) != 1 || !errors.As(retries[0].Err, &e) || e.Kind != llm.KindTruncated || !e.Retryable {
				t.Fatalf("retries = %+v, want one retryable truncated retry", retries)
			}
			if want := "no data from the model for 3s (--model-idle-timeout)"; !strings.Contains(e.Error(), want) {
				t.Errorf("retry error %q does not say %q", e, want)
			}
		})
	}
}

// Data chunks are progress: a slow stream whose whole reply takes longer
// than IdleTimeout, but never goes that long without a chunk, succeeds.
// A chunk comes every 160 ms, well within the 3 s a loaded machine may
// take between two.
func TestSlowDataChunksKeepTheCallAlive(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t, llmtest.Script{Turns: []llmtest.Turn{
		{Text: strings.Repeat("words ", 64), ChunkDelayMS: 160, KeepaliveMS: 5}, // 24 chunks of 16 runes
	}})
	c, _ := newClient(t, srv.URL(), func(cfg *llm.Config) {
		cfg.IdleTimeout = 3 * time.Second
		cfg.MaxAttempts = 1
	})
	start := time.Now()
	resp, err := c.Stream(context.Background(), simpleRequest, nil)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	if resp.Message.Content != strings.Repeat("words ", 64) {
		t.Errorf("content = %q", resp.Message.Content)
	}
	if d := time.Since(start); d < 3*time.Second {
		t.Errorf("the stream took %v, not longer than IdleTimeout: the test proves nothing", d)
	}
}

// Setup passes the timeouts on: an idle timeout named in the error, and a
// call timeout a Retry-After cannot outlast.
func TestSetupTimeouts(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), safetyNet)
	defer cancel()

	srv := llmtest.NewServer(t, llmtest.Script{Turns: []llmtest.Turn{{Text: "late", DelayMS: 60_000, KeepaliveMS: 5}}})
	model, closeModel, err := llm.Open(llm.Setup{BaseURL: srv.URL(), MaxAttempts: 1, IdleTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer closeModel()
	_, err = model.Stream(ctx, simpleRequest, nil)
	if want := "model provider: response truncated: no data from the model for 100ms (--model-idle-timeout)"; err == nil || err.Error() != want {
		t.Errorf("err = %v, want %q", err, want)
	}

	srv = llmtest.NewServer(t, llmtest.Script{Loop: true, Turns: []llmtest.Turn{{Status: 429, Headers: map[string]string{"Retry-After": "10"}}}})
	model, closeModel, err = llm.Open(llm.Setup{BaseURL: srv.URL(), CallTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer closeModel()
	_, err = model.Stream(ctx, simpleRequest, nil)
	var e *llm.Error
	if !errors.As(err, &e) || !e.WaitTooLong || e.RetryAfter != 10*time.Second || srv.RequestCount() != 1 {
		t.Errorf("err = %v after %d requests, want a rate limit too long to wait for after 1", err, srv.RequestCount())
	}
}

// With the default settings a stalled provider ends the call, and so the
// run (exit 3, resumable), within 5 minutes: a stall is retried once, the
// transient errors around it as before, and no call outlasts
// DefaultCallTimeout. The stalls here last the default idle timeout
// scaled down 1200 times (100ms for 2m), and Sleep returns at once; the
// time a user would wait adds up each stalled attempt at the default idle
// timeout and each backoff at its largest jitter.
func TestDefaultsEndAStalledProviderWithinFiveMinutes(t *testing.T) {
	t.Parallel()
	const bound = 5 * time.Minute
	if llm.DefaultCallTimeout > bound {
		t.Errorf("DefaultCallTimeout %v: a call may outlast %v", llm.DefaultCallTimeout, bound)
	}
	const scale = 1200
	keepalives := llmtest.Turn{Text: "late", DelayMS: 60_000, KeepaliveMS: 10}
	silence := llmtest.Turn{Text: "late", DelayMS: 60_000}
	afterContent := llmtest.Turn{Text: "stalls", Hang: true, KeepaliveMS: 10}
	busy := llmtest.Turn{Status: 503, Body: "upstream busy"}
	for _, tt := range []struct {
		name  string
		turns []llmtest.Turn
	}{
		{"keep-alives only", []llmtest.Turn{keepalives}},
		{"silence", []llmtest.Turn{silence}},
		{"stalls after some content", []llmtest.Turn{afterContent}},
		{"server errors then stalls", []llmtest.Turn{busy, busy, busy, keepalives, silence}},
		{"stalls between server errors", []llmtest.Turn{keepalives, busy, busy, silence, {Text: "never reached"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := llmtest.NewServer(t, llmtest.Script{Loop: true, Turns: tt.turns})
			var retries []llm.RetryInfo
			c, clock := newClient(t, srv.URL(), func(cfg *llm.Config) {
				cfg.IdleTimeout = llm.DefaultIdleTimeout / scale
				cfg.Rand = func() float64 { return 0.999 }
				cfg.OnRetry = func(ri llm.RetryInfo) { retries = append(retries, ri) }
			})
			ctx, cancel := context.WithTimeout(context.Background(), safetyNet)
			defer cancel()
			_, err := c.Stream(ctx, simpleRequest, nil)
			var e *llm.Error
			if !errors.As(err, &e) || !e.Stalled || !e.Retryable {
				t.Fatalf("err = %v, want the call ended by a stall, retryable (resume)", err)
			}
			stalls := 1 // the last attempt
			for _, r := range retries {
				var re *llm.Error
				if errors.As(r.Err, &re) && re.Stalled {
					stalls++
					if want := "no data from the model for 100ms (--model-idle-timeout)"; !strings.Contains(re.Error(), want) {
						t.Errorf("a stall's retry says %q, not why (%q)", re, want)
					}
				} else if want := "server error (503): upstream busy"; !strings.Contains(r.Err.Error(), want) {
					t.Errorf("a 503's retry says %q, not why (%q)", r.Err, want)
				}
			}
			waited := time.Duration(stalls) * llm.DefaultIdleTimeout
			for _, d := range clock.Delays() {
				waited += d
			}
			if waited > bound {
				t.Errorf("%d stalls of %v and waits %v: the provider holds the run %v, more than %v", stalls, llm.DefaultIdleTimeout, clock.Delays(), waited, bound)
			}
			if !strings.Contains(err.Error(), "the provider stalled 2 times, so the call is not tried again") {
				t.Errorf("the final error %q does not say why it gave up", err)
			}
			t.Logf("%d requests, %d stalls: over after %v with the defaults", srv.RequestCount(), stalls, waited)
		})
	}
}

// A stall is retried once, and transient errors as often as before: a
// provider that recovers after one stall and a few 503s answers. The idle
// timeout is generous: the answer must not stall on a loaded machine.
func TestOneStallIsRetried(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t, llmtest.Script{Turns: []llmtest.Turn{
		{Status: 503}, {Text: "late", DelayMS: 60_000, KeepaliveMS: 10}, {Status: 503}, {Status: 502}, {Text: "fresh"},
	}})
	c, _ := newClient(t, srv.URL(), func(cfg *llm.Config) { cfg.IdleTimeout = 3 * time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), safetyNet)
	defer cancel()
	resp, err := c.Stream(ctx, simpleRequest, nil)
	if err != nil || resp.Message.Content != "fresh" || srv.RequestCount() != 5 {
		t.Fatalf("resp %+v, err %v after %d requests; want the fifth attempt's reply", resp, err, srv.RequestCount())
	}
}

// A Retry-After longer than the call may take fails the call at once and
// says so, rather than sleeping (or sleeping a shortened wait and trying
// again).
func TestRetryAfterLongerThanTheCall(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t, llmtest.Script{Loop: true, Turns: []llmtest.Turn{
		{Status: 429, Headers: map[string]string{"Retry-After": "3600"}, Body: `{"error":{"message":"slow down"}}`},
	}})
	var retries int
	c, clock := newClient(t, srv.URL(), func(c *llm.Config) { c.OnRetry = func(llm.RetryInfo) { retries++ } })
	_, err := c.Stream(context.Background(), simpleRequest, nil)
	var e *llm.Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v, want an *llm.Error", err)
	}
	if e.Kind != llm.KindRateLimit || e.Status != 429 || !e.WaitTooLong || e.RetryAfter != time.Hour || !e.Retryable {
		t.Errorf("error = %+v, want a retryable 429 rate limit, WaitTooLong, RetryAfter 1h", e)
	}
	want := "model provider: rate limited (429): the provider asks to wait 1h0m0s (Retry-After), longer than the call may take (5m0s); try again later (server said: slow down)"
	if err.Error() != want {
		t.Errorf("error = %q\nwant    %q", err, want)
	}
	if srv.RequestCount() != 1 || len(clock.Delays()) != 0 || retries != 0 {
		t.Errorf("requests %d, sleeps %v, retries %d; want 1 request and no wait", srv.RequestCount(), clock.Delays(), retries)
	}
}

// Backoff waits count towards the call's deadline: once the next one would
// pass it, the call fails at once with the last error.
func TestBackoffPastTheCallDeadline(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t, llmtest.Script{Loop: true, Turns: []llmtest.Turn{{Status: 503, Body: "upstream busy"}}})
	c, clock := newClient(t, srv.URL(), func(c *llm.Config) {
		c.CallTimeout = 20 * time.Second
		c.BackoffBase = 5 * time.Second
		c.MaxAttempts = 10
	})
	_, err := c.Stream(context.Background(), simpleRequest, nil)
	var e *llm.Error
	if !errors.As(err, &e) || e.Kind != llm.KindServer || !e.WaitTooLong || e.Attempts != 3 {
		t.Fatalf("err = %#v, want a server error that gave up after 3 attempts", err)
	}
	// Rand is 0.5: 3.75s, 7.5s, then 15s would pass the 8.75s left. The
	// injected Sleep returns at once: the waits count all the same.
	want := "model provider: server error (503): upstream busy; the next retry would wait 15s, longer than the 8.75s left of the call's 20s (after 3 attempts)"
	if err.Error() != want {
		t.Errorf("error = %q\nwant    %q", err, want)
	}
	if d := clock.Delays(); len(d) != 2 || srv.RequestCount() != 3 {
		t.Errorf("sleeps %v, requests %d; want 2 and 3", d, srv.RequestCount())
	}
}

// An attempt still running at the call's deadline is cut off, even while
// data flows, and the call fails without another attempt.
func TestCallTimeoutCutsAnAttempt(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t, llmtest.Script{Loop: true, Turns: []llmtest.Turn{
		{Text: strings.Repeat("slow ", 100), ChunkDelayMS: 20},
	}})
	var retries int
	c, _ := newClient(t, srv.URL(), func(c *llm.Config) {
		c.CallTimeout = 200 * time.Millisecond
		c.OnRetry = func(llm.RetryInfo) { retries++ }
	})
	ctx, cancel := context.WithTimeout(context.Background(), safetyNet)
	defer cancel()
	_, err := c.Stream(ctx, simpleRequest, nil)
	var e *llm.Error
	if !errors.As(err, &e) || e.Kind != llm.KindTimeout {
		t.Fatalf("err = %v, want a timeout *llm.Error", err)
	}
	if want := "model provider: timed out: no complete reply within 200ms, the longest a model call may take (--model-call-timeout); try again later"; err.Error() != want {
		t.Errorf("error = %q\nwant    %q", err, want)
	}
	if srv.RequestCount() != 1 || retries != 0 {
		t.Errorf("requests %d, retries %d; want 1 and 0", srv.RequestCount(), retries)
	}
}

// A line longer than 16 MiB is refused as soon as it passes the limit,
// not read whole, and not retried: the same request would get it again.
// Not parallel: moving this much data would slow the timing tests.
func TestOverlongLineRefused(t *testing.T) {
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, ": OPENROUTER PROCESSING\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"")
		block := []byte(strings.Repeat("a", 64<<10))
		for range (24 << 20) / len(block) {
			if _, err := w.Write(block); err != nil {
				return
			}
			served.Add(int64(len(block)))
		}
	}))
	t.Cleanup(srv.Close)
	c, clock := newClient(t, srv.URL+"/v1", nil)
	_, err := c.Stream(context.Background(), simpleRequest, nil)
	var e *llm.Error
	if !errors.As(err, &e) || e.Kind != llm.KindStream || e.Retryable {
		t.Fatalf("err = %v, want a non-retryable stream *llm.Error", err)
	}
	if want := "model provider: error in stream: model response line of more than 16 MiB refused"; err.Error() != want {
		t.Errorf("error = %q\nwant    %q", err, want)
	}
	if len(clock.Delays()) != 0 {
		t.Errorf("retried after %v", clock.Delays())
	}
}

// A non-streaming body is bounded too. Not parallel, as above.
func TestOverlongBodyRefused(t *testing.T) {
	body := `{"choices":[{"index":0,"message":{"role":"assistant","content":"` + strings.Repeat("a", 17<<20) + `"},"finish_reason":"stop"}]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, body)
	}))
	t.Cleanup(srv.Close)
	c, clock := newClient(t, srv.URL+"/v1", nil)
	_, err := c.Complete(context.Background(), simpleRequest)
	var e *llm.Error
	if !errors.As(err, &e) || e.Kind != llm.KindStream || e.Retryable {
		t.Fatalf("err = %v, want a non-retryable stream *llm.Error", err)
	}
	if want := "model provider: error in stream: model response of more than 16 MiB refused"; err.Error() != want {
		t.Errorf("error = %q\nwant    %q", err, want)
	}
	if len(clock.Delays()) != 0 {
		t.Errorf("retried after %v", clock.Delays())
	}
}
