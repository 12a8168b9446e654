package llm_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"agent/llm"
)

// providerFixtures holds SSE streams captured from real providers. The
// repo is checked out with ../shared beside it, locally and in CI.
const providerFixtures = "../../shared/fixtures/providers"

// fixtureRow is one row of INDEX.tsv.
type fixtureRow struct {
	name  string
	kind  string // "tools", "text" or "error"
	calls []fixtureCall
	text  string
	class string     // for errors: "retryable", "fatal" or "any"
	usage *llm.Usage // nil when not checked
}

type fixtureCall struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// TestProviderFixtures replays every captured stream byte for byte and
// checks it gives the outcome INDEX.tsv names.
func TestProviderFixtures(t *testing.T) {
	t.Parallel()
	rows := loadFixtureIndex(t, providerFixtures)
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			body, err := os.ReadFile(filepath.Join(providerFixtures, row.name+".sse"))
			if err != nil {
				t.Fatalf("read fixture: %v", err)
			}
			var requests atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				w.Header().Set("Content-Type", "text/event-stream")
				w.Write(body)
			}))
			t.Cleanup(srv.Close)
			// One attempt: a misread surfaces as an error at once, and a
			// retryable fixture error does not sit through backoff.
			c, _ := newClient(t, srv.URL+"/v1", func(c *llm.Config) { c.MaxAttempts = 1 })

			var deltas strings.Builder
			resp, err := c.Stream(context.Background(), simpleRequest, func(s string) { deltas.WriteString(s) })
			if n := requests.Load(); n != 1 {
				t.Errorf("server got %d requests, want 1", n)
			}
			if row.kind == "error" {
				checkFixtureError(t, row.class, err)
				return
			}
			if err != nil {
				t.Fatalf("stream: %v", err)
			}
			switch row.kind {
			case "text":
				if resp.Message.Content != row.text {
					t.Errorf("content = %q\nwant      %q", resp.Message.Content, row.text)
				}
				if got := deltas.String(); got != row.text {
					t.Errorf("onText got %q\nwant        %q", got, row.text)
				}
				if len(resp.Message.ToolCalls) != 0 {
					t.Errorf("got tool calls %+v, want none", resp.Message.ToolCalls)
				}
			case "tools":
				checkFixtureCalls(t, resp, row.calls)
			}
			if row.usage != nil && resp.Usage != *row.usage {
				t.Errorf("usage = %+v, want %+v", resp.Usage, *row.usage)
			}
		})
	}
}

func checkFixtureError(t *testing.T, class string, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("stream succeeded, want a %s error", class)
	}
	t.Logf("error: %v", err)
	if class == "any" {
		return
	}
	var e *llm.Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v (%T), want *llm.Error", err, err)
	}
	if want := class == "retryable"; e.Retryable != want {
		t.Errorf("err = %v: retryable %v, want %s", err, e.Retryable, class)
	}
}

// checkFixtureCalls compares names and arguments as JSON values, so the
// providers' spacing does not matter.
func checkFixtureCalls(t *testing.T, resp *llm.Response, want []fixtureCall) {
	t.Helper()
	got := resp.Message.ToolCalls
	if len(got) != len(want) {
		t.Fatalf("got %d tool calls %+v, want %d", len(got), got, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Name != w.Name {
			t.Errorf("call %d name = %q, want %q", i, g.Name, w.Name)
		}
		var gv, wv any
		if err := json.Unmarshal([]byte(g.Arguments), &gv); err != nil {
			t.Errorf("call %d arguments %q are not JSON: %v", i, g.Arguments, err)
			continue
		}
		if err := json.Unmarshal(w.Arguments, &wv); err != nil {
			t.Fatalf("INDEX.tsv: call %d arguments: %v", i, err)
		}
		if !reflect.DeepEqual(gv, wv) {
			t.Errorf("call %d arguments = %s, want %s", i, g.Arguments, w.Arguments)
		}
		if g.ID == "" {
			t.Errorf("call %d has no id", i)
		}
	}
	if resp.FinishReason != "tool_calls" {
		t.Errorf("finish = %q, want tool_calls", resp.FinishReason)
	}
}

// loadFixtureIndex parses INDEX.tsv and checks that it and the .sse
// files name the same fixtures, so none is silently left out.
func loadFixtureIndex(t *testing.T, dir string) []fixtureRow {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "INDEX.tsv"))
	if err != nil {
		t.Fatalf("provider fixtures not found (want ../shared checked out beside the repo): %v", err)
	}
	defer f.Close()
	var rows []fixtureRow
	listed := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20) // the expected texts make long lines
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		row, err := parseFixtureRow(line)
		if err != nil {
			t.Fatalf("INDEX.tsv line %d: %v", n, err)
		}
		if listed[row.name] {
			t.Fatalf("INDEX.tsv line %d: %s listed twice", n, row.name)
		}
		listed[row.name] = true
		rows = append(rows, row)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read INDEX.tsv: %v", err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.sse"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range files {
		if name := strings.TrimSuffix(filepath.Base(p), ".sse"); !listed[name] {
			t.Errorf("%s is not in INDEX.tsv", filepath.Base(p))
		}
	}
	if len(rows) == 0 || len(files) != len(rows) {
		t.Fatalf("INDEX.tsv lists %d fixtures, the folder holds %d .sse files", len(rows), len(files))
	}
	return rows
}

// parseFixtureRow reads: name, model, source, what it shows, expected
// outcome, expected usage.
func parseFixtureRow(line string) (fixtureRow, error) {
	cols := strings.Split(line, "\t")
	if len(cols) != 6 {
		return fixtureRow{}, fmt.Errorf("got %d columns, want 6", len(cols))
	}
	row := fixtureRow{name: cols[0]}
	kind, spec, ok := strings.Cut(cols[4], ": ")
	if !ok {
		return row, fmt.Errorf("outcome %q: want kind: value", cols[4])
	}
	row.kind = kind
	switch kind {
	case "tools":
		if err := json.Unmarshal([]byte(spec), &row.calls); err != nil {
			return row, fmt.Errorf("tools outcome: %w", err)
		}
	case "text":
		if err := json.Unmarshal([]byte(spec), &row.text); err != nil {
			return row, fmt.Errorf("text outcome: %w", err)
		}
	case "error":
		if spec != "retryable" && spec != "fatal" && spec != "any" {
			return row, fmt.Errorf("error outcome %q: want retryable, fatal or any", spec)
		}
		row.class = spec
	default:
		return row, fmt.Errorf("outcome kind %q: want tools, text or error", kind)
	}
	if u := cols[5]; u != "-" {
		p, c, ok := strings.Cut(u, "/")
		pn, perr := strconv.Atoi(p)
		cn, cerr := strconv.Atoi(c)
		if !ok || perr != nil || cerr != nil {
			return row, fmt.Errorf("usage %q: want P/C or -", u)
		}
		row.usage = &llm.Usage{PromptTokens: pn, CompletionTokens: cn}
	}
	return row, nil
}
