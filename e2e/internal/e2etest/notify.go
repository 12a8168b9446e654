package e2etest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"agent/store"
)

// Webhook is an HTTP receiver on the loopback that keeps what it gets: a
// [[notify]] webhook.
type Webhook struct {
	URL string

	mu       sync.Mutex
	statuses []int // the answers of the first requests; then 200
	got      []WebhookRequest
	// Hold, if set, runs when a request has been read, before it is
	// answered: the moment between "delivered" and "its receipt".
	Hold func()
}

// WebhookRequest is one request a Webhook got and how it answered.
type WebhookRequest struct {
	Key    string // Idempotency-Key
	Body   []byte
	Status int
}

// NewWebhook serves a Webhook for as long as the test runs; its first
// requests are answered with statuses, the rest with 200.
func NewWebhook(t *testing.T, statuses ...int) *Webhook {
	t.Helper()
	h := &Webhook{statuses: statuses}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		status := http.StatusOK
		if len(h.statuses) > 0 {
			status, h.statuses = h.statuses[0], h.statuses[1:]
		}
		h.got = append(h.got, WebhookRequest{Key: r.Header.Get("Idempotency-Key"), Body: body, Status: status})
		hold := h.Hold
		h.mu.Unlock()
		if hold != nil {
			hold()
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	h.URL = srv.URL + "/hook"
	return h
}

// Requests are the requests so far.
func (h *Webhook) Requests() []WebhookRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]WebhookRequest(nil), h.got...)
}

// Messages decodes the bodies of the requests answered 200.
func (h *Webhook) Messages(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, r := range h.Requests() {
		if r.Status != http.StatusOK {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(r.Body, &m); err != nil {
			t.Fatalf("the webhook got %q: %v", r.Body, err)
		}
		out = append(out, m)
	}
	return out
}

// WriteConfig writes the agent's config.toml.
func (e *Env) WriteConfig(content string) {
	e.T.Helper()
	if err := os.MkdirAll(e.Home, 0o700); err != nil {
		e.T.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.Home, "config.toml"), []byte(content), 0o600); err != nil {
		e.T.Fatal(err)
	}
}

// Notifications are a run's notifications, as agent runs show lists them.
func Notifications(t *testing.T, db *store.DB, runID string) []store.Notification {
	t.Helper()
	ns, err := db.Notifications(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// NotificationStates are their states, space-separated.
func NotificationStates(t *testing.T, db *store.DB, runID string) string {
	t.Helper()
	var states []string
	for _, n := range Notifications(t, db, runID) {
		states = append(states, n.State)
	}
	return strings.Join(states, " ")
}

// WaitLong waits up to within for cond to hold, checking every 20 ms:
// for what takes seconds by design (a lease or a claim running out).
func WaitLong(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
