package tools

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

func slackEnv(url string) map[string]string {
	return map[string]string{"AGENT_SLACK_TOKEN": "xoxb-test", "AGENT_SLACK_API_URL": url}
}

func TestSlackPost(t *testing.T) {
	t.Parallel()
	okJSON := func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true,"channel":"C123","ts":"1700000000.000100","message":{"text":"deploy done"}}`)
	}
	tests := []struct {
		name    string
		respond func(w http.ResponseWriter)
		want    string // outcome
		output  string
	}{
		{"ok", okJSON, "sent", "message posted to C123 (ts 1700000000.000100)"},
		{"ok false", func(w http.ResponseWriter) {
			io.WriteString(w, `{"ok":false,"error":"channel_not_found"}`)
		}, "not_sent", "the Slack API refused the message: channel_not_found"},
		{"rate limited", func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"ok":false,"error":"ratelimited"}`)
		}, "not_sent", "rate limited by Slack (HTTP 429, Retry-After: 30 seconds)"},
		{"4xx with an error body", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"ok":false,"error":"invalid_arguments"}`)
		}, "not_sent", "HTTP 400: invalid_arguments"},
		{"redirect", func(w http.ResponseWriter) {
			w.Header().Set("Location", "https://example.com/")
			w.WriteHeader(http.StatusFound)
		}, "not_sent", "HTTP 302"},
		{"5xx", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusInternalServerError)
		}, "unknown", "the Slack API answered HTTP 500"},
		{"unreadable 200", func(w http.ResponseWriter) {
			io.WriteString(w, `<html>proxy</html>`)
		}, "unknown", "unreadable answer from Slack (HTTP 200)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var requests atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				var body map[string]string
				err := json.NewDecoder(r.Body).Decode(&body)
				switch {
				case r.Method != http.MethodPost || r.URL.Path != "/api/chat.postMessage":
					t.Errorf("request %s %s", r.Method, r.URL.Path)
				case r.Header.Get("Authorization") != "Bearer xoxb-test":
					t.Errorf("Authorization %q", r.Header.Get("Authorization"))
				case !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json"):
					t.Errorf("Content-Type %q", r.Header.Get("Content-Type"))
				case err != nil || len(body) != 2 || body["channel"] != "C123" || body["text"] != "deploy  done":
					t.Errorf("body %v (%v)", body, err)
				}
				tt.respond(w)
			}))
			defer srv.Close()
			ob := &fakeOutbox{}
			tool := effectToolNamed(t, "slack_post", ob, slackEnv(srv.URL+"/api/"))
			res := runEffect(t, t.Context(), tool, map[string]string{"channel": " C123 ", "text": "deploy  done"})
			if got := outcome(t, res); got != tt.want {
				t.Fatalf("outcome %q, want %q: %s", got, tt.want, res.Output)
			}
			if !strings.Contains(res.Output, tt.output) {
				t.Errorf("output %q does not contain %q", res.Output, tt.output)
			}
			if n := requests.Load(); n != 1 {
				t.Errorf("%d requests, want 1", n)
			}
			key := EffectKey(testScope, Effects[1], map[string]any{"channel": "C123", "text": "deploy done"})
			if in := ob.Intents(); len(in) != 1 || in[0].Key != key || in[0].ReceiptType != "slack_message_sent" {
				t.Errorf("intents %+v, want key %s", in, key)
			}
			if tt.want == "sent" {
				r := receiptOf(t, res)
				if r.Type != "slack_message_sent" || r.Key != key || !sameJSON(t, r.Details, `{"channel":"C123","ts":"1700000000.000100"}`) {
					t.Errorf("receipt %+v details %s", r, r.Details)
				}
			}
		})
	}
}

func TestSlackPostConnectionClosedAfterRequest(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body) // the whole request has arrived
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		conn.Close()
	}))
	defer srv.Close()
	tool := effectToolNamed(t, "slack_post", &fakeOutbox{}, slackEnv(srv.URL))
	res := runEffect(t, t.Context(), tool, map[string]string{"channel": "C123", "text": "hi"})
	if got := outcome(t, res); got != "unknown" {
		t.Fatalf("outcome %q: %s", got, res.Output)
	}
	if !strings.Contains(res.Output, "no response from Slack after the request was sent") {
		t.Errorf("output %q", res.Output)
	}
}

func TestSlackPostConnectionRefused(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	l.Close()
	tool := effectToolNamed(t, "slack_post", &fakeOutbox{}, slackEnv(url))
	res := runEffect(t, t.Context(), tool, map[string]string{"channel": "C123", "text": "hi"})
	if got := outcome(t, res); got != "not_sent" {
		t.Fatalf("outcome %q: %s", got, res.Output)
	}
}

func TestSlackPostDefaultURL(t *testing.T) {
	t.Parallel()
	p := newSlackPost(envMap(map[string]string{"AGENT_SLACK_TOKEN": "x"}), EffectOptions{})
	if p.url != "https://slack.com/api/chat.postMessage" || p.client.Timeout != slackTimeout {
		t.Errorf("url %q timeout %v", p.url, p.client.Timeout)
	}
}
