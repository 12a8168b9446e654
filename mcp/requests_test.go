package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"agent/config"
	"agent/mcp/mcptest"
	"agent/tools"
)

// A server whose tools change says so; Refresh lists them again, warns
// with what came and went, and a tool that went is named as gone. Here
// only the notification says it: the call that changed them is
// forgotten, as a change on the server's own time would be.
func TestToolListChangedIsRefreshed(t *testing.T) {
	srv, _ := testServer(t, "tracker", nil)
	set, s, w := startSet(t, []Server{srv}, nil)
	if res := set.Run(context.Background(), "mcp__tracker__swap_tools", `{}`); res.IsError {
		t.Fatalf("swap_tools: %s", res.Output)
	}
	s.conns[0].called.Store(false)
	deadline := time.Now().Add(patience)
	changed := false
	for !changed && time.Now().Before(deadline) {
		if changed = s.Refresh(context.Background()); !changed {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if !changed {
		t.Fatalf("Refresh never saw the change; warnings: %s", w)
	}
	var names []string
	for _, tl := range s.Tools(tools.EffectScope{}, nil) {
		names = append(names, tl.Definition().Name)
	}
	got := strings.Join(names, " ")
	if !strings.Contains(got, "mcp__tracker__shout") || strings.Contains(got, "mcp__tracker__echo") {
		t.Errorf("tools after the change: %s", got)
	}
	if !strings.Contains(w.String(), `MCP server "tracker" changed its tools: now also offers shout; no longer offers echo`) {
		t.Errorf("warnings: %s", w)
	}
	if why := s.Gone("mcp__tracker__echo"); !strings.Contains(why, "no longer offers mcp__tracker__echo") {
		t.Errorf("Gone(echo) = %q", why)
	}
	if s.Refresh(context.Background()) {
		t.Error("a second Refresh without a new notification changed something")
	}
}

// answers is a tools.Call that records what a call reported and asked,
// answering each question with the next answer.
type answers struct {
	mu        sync.Mutex
	progress  []string
	questions []tools.Question
	next      []tools.Answer
}

// reported is the progress messages so far: a late notification may
// still come on the client's goroutine after the call returned.
func (a *answers) reported() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.progress...)
}

func (a *answers) call() *tools.Call {
	return &tools.Call{ID: "c1", Name: "mcp__tracker__x",
		Progress: func(p, total float64, msg string) {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.progress = append(a.progress, msg)
		},
		Ask: func(_ context.Context, q tools.Question) (tools.Answer, error) {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.questions = append(a.questions, q)
			ans := a.next[0]
			a.next = a.next[1:]
			return ans, nil
		}}
}

func TestProgressReachesTheCall(t *testing.T) {
	srv, _ := testServer(t, "tracker", nil)
	set, _, _ := startSet(t, []Server{srv}, nil)
	a := &answers{}
	res := set.Run(tools.WithCall(context.Background(), a.call()), "mcp__tracker__steps", `{"n":3,"ms":200}`)
	if res.IsError || res.Output != "took 3 steps" {
		t.Fatalf("steps: %+v", res)
	}
	// The client takes notifications on a goroutine of its own: the
	// last ones may come after the result, when the call is over.
	if got := strings.Join(a.reported(), ","); !strings.HasPrefix("step 1,step 2,step 3", got) || !strings.HasPrefix(got, "step 1") {
		t.Errorf("progress reported: %q", got)
	}
}

// An elicitation is asked of the person through the call; an answer
// that does not fit the form is asked again; decline and timeout are
// the server's decline and cancel.
func TestElicitationIsAskedThroughTheCall(t *testing.T) {
	srv, _ := testServer(t, "tracker", nil)
	srv.ToolTimeout = 2 * time.Second
	set, _, _ := startSet(t, []Server{srv}, nil)
	for _, tc := range []struct {
		answers []tools.Answer
		want    string
	}{
		{[]tools.Answer{{Text: "blue"}}, "the person answered: blue"},
		{[]tools.Answer{{Text: `{"colour":"blue"}`}, {Text: `{"answer":"green"}`}}, "the person answered: green"},
		{[]tools.Answer{{Declined: true}}, "the person chose decline"},
		{[]tools.Answer{{Text: "decline"}}, "the person chose decline"},
		{[]tools.Answer{{TimedOut: true}}, "the person chose cancel"},
	} {
		a := &answers{next: tc.answers}
		res := set.Run(tools.WithCall(context.Background(), a.call()), "mcp__tracker__ask", `{"question":"Which colour?"}`)
		if res.IsError || res.Output != tc.want {
			t.Errorf("answers %+v: result %+v, want %q", tc.answers, res, tc.want)
			continue
		}
		q := a.questions[0]
		if q.Server != "tracker" || q.Seq != 1 || !strings.Contains(q.Text, "Which colour? (asked while mcp__tracker__x runs)") ||
			!strings.Contains(q.Text, "answer (string, required): Your answer") {
			t.Errorf("question: %+v", q)
		}
		if len(a.questions) == 2 && !strings.Contains(a.questions[1].Text, "did not fit") {
			t.Errorf("the second question does not say why: %s", a.questions[1].Text)
		}
	}
}

// A person takes longer than the call's tool_timeout_s: the clock stands
// still while they are asked.
func TestToolTimeoutStandsStillWhileAPersonIsAsked(t *testing.T) {
	srv, _ := testServer(t, "tracker", nil)
	srv.ToolTimeout = 500 * time.Millisecond
	set, _, _ := startSet(t, []Server{srv}, nil)
	c := &tools.Call{ID: "c1", Name: "x", Ask: func(context.Context, tools.Question) (tools.Answer, error) {
		time.Sleep(1200 * time.Millisecond)
		return tools.Answer{Text: "late but fine"}, nil
	}}
	res := set.Run(tools.WithCall(context.Background(), c), "mcp__tracker__ask", `{"question":"?"}`)
	if res.IsError || res.Output != "the person answered: late but fine" {
		t.Fatalf("result: %+v", res)
	}
}

// A call without anyone to ask declines; sampling is refused, saying
// agent does not support it.
func TestElicitationWithoutACallAndSamplingAreRefused(t *testing.T) {
	srv, _ := testServer(t, "tracker", nil)
	set, _, w := startSet(t, []Server{srv}, nil)
	if res := set.Run(context.Background(), "mcp__tracker__ask", `{"question":"?"}`); res.Output != "the person chose decline" {
		t.Errorf("ask without a call: %+v", res)
	}
	res := set.Run(context.Background(), "mcp__tracker__sample", `{}`)
	if !res.IsError || !strings.Contains(res.Output, "agent does not support sampling") {
		t.Errorf("sample: %+v", res)
	}
	if !strings.Contains(w.String(), `MCP server "tracker" asked for sampling`) {
		t.Errorf("warnings: %s", w)
	}
}

func TestResourcesAreListedAndRead(t *testing.T) {
	srv, _ := testServer(t, "tracker", nil)
	_, s, _ := startSet(t, []Server{srv}, nil)
	rt := s.ResourceTools()
	if len(rt) != 2 {
		t.Fatalf("resource tools: %d", len(rt))
	}
	ws, _ := tools.NewWorkspace(t.TempDir())
	set, err := tools.NewSet(ws, tools.Options{}, rt...)
	if err != nil {
		t.Fatal(err)
	}
	list := set.Run(context.Background(), ResourcesName, `{}`)
	if list.IsError || !strings.Contains(list.Output, "notes://readme readme (text/plain): What the notes are.") ||
		!strings.Contains(list.Output, "notes://logo logo (image/png)") {
		t.Errorf("list: %+v", list)
	}
	read := set.Run(context.Background(), ReadResourceName, `{"server":"tracker","uri":"notes://readme"}`)
	if read.IsError || !strings.Contains(read.Output, "the launch code is 0000") {
		t.Errorf("read text: %+v", read)
	}
	blob := set.Run(context.Background(), ReadResourceName, `{"server":"tracker","uri":"notes://logo"}`)
	if blob.IsError || !strings.Contains(blob.Output, "[resource notes://logo (image/png), ") || strings.Contains(blob.Output, "PNG") {
		t.Errorf("read blob: %+v", blob)
	}
	if bad := set.Run(context.Background(), ReadResourceName, `{"server":"docs","uri":"x"}`); !bad.IsError ||
		!strings.Contains(bad.Output, `no MCP server "docs" with resources; servers with resources: tracker`) {
		t.Errorf("unknown server: %+v", bad)
	}
}

func TestFormParsesAnswers(t *testing.T) {
	schema := map[string]any{"type": "object", "required": []any{"name"}, "properties": map[string]any{
		"name":  map[string]any{"type": "string"},
		"age":   map[string]any{"type": "integer", "minimum": 1, "maximum": 150},
		"agree": map[string]any{"type": "boolean"},
	}}
	f, err := newForm("Who are you?", schema)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ answer, want, problem string }{
		{"Ada", `{"name":"Ada"}`, ""},
		{`{"name":"Ada","age":36,"agree":true}`, `{"age":36,"agree":true,"name":"Ada"}`, ""},
		{`{"name":"Ada","age":300}`, "", "maximum"},
		{`{"age":3}`, "", "name"},
		{`{"name":`, "", "not a JSON object"},
	} {
		content, problem := f.parse(tc.answer)
		got, _ := json.Marshal(content)
		if tc.problem == "" && (problem != "" || string(got) != tc.want) || tc.problem != "" && !strings.Contains(problem, tc.problem) {
			t.Errorf("parse(%q) = %s, %q", tc.answer, got, problem)
		}
	}
	q := f.question("mcp__id__who", "")
	if !strings.HasPrefix(q, "Who are you? (asked while mcp__id__who runs)\nFields:\n  name (string, required)\n  age (integer, 1–150)\n  agree (boolean)") ||
		!strings.Contains(q, "Answer with the value of name, or a JSON object of the fields") {
		t.Errorf("question:\n%s", q)
	}
}

// What the list-change check adds to each model request when nothing
// changed: after a turn that called no tool of the server, and after one
// that did (its tools are listed again: the test server says they may
// change, and offers 18).
func BenchmarkRefreshUnchanged(b *testing.B) {
	srv, _ := testServer(b, "tracker", nil)
	_, s, _ := startSet(b, []Server{srv}, nil)
	ctx := context.Background()
	for _, called := range []bool{false, true} {
		b.Run(fmt.Sprintf("called=%v", called), func(b *testing.B) {
			for b.Loop() {
				s.conns[0].called.Store(called)
				if s.Refresh(ctx) {
					b.Fatal("changed")
				}
			}
		})
	}
}

// A call whose server reports its progress n times: what the
// notifications cost the call (the loop records at most one a second).
func BenchmarkCallProgress(b *testing.B) {
	srv, _ := testServer(b, "tracker", map[string]string{mcptest.EnvLog: ""}) // no call log to grow
	set, _, _ := startSet(b, []Server{srv}, nil)
	for _, n := range []int{0, 100} {
		b.Run(fmt.Sprintf("notifications=%d", n), func(b *testing.B) {
			var got atomic.Int64
			ctx := tools.WithCall(context.Background(), &tools.Call{ID: "c", Name: "x",
				Progress: func(float64, float64, string) { got.Add(1) }})
			args := fmt.Sprintf(`{"n":%d,"ms":0}`, n)
			for b.Loop() {
				if res := set.Run(ctx, "mcp__tracker__steps", args); res.IsError {
					b.Fatal(res.Output)
				}
			}
			b.ReportMetric(float64(got.Load())/float64(b.N), "reported/call")
		})
	}
}

// Over Streamable HTTP too: a list change, progress and a question.
func TestServerRequestsOverHTTP(t *testing.T) {
	hs := httptest.NewServer(mcptest.Handler("", ""))
	t.Cleanup(hs.Close) // after the client's streams are closed (startSet's Cleanup)
	srv, err := check("docs", config.MCPServer{URL: hs.URL}, "test config")
	if err != nil {
		t.Fatal(err)
	}
	set, s, w := startSet(t, []Server{srv}, nil)
	a := &answers{next: []tools.Answer{{Text: "green"}}}
	ctx := tools.WithCall(context.Background(), a.call())
	if res := set.Run(ctx, "mcp__docs__steps", `{"n":2,"ms":200}`); res.Output != "took 2 steps" || len(a.reported()) == 0 {
		t.Errorf("steps: %+v, progress %v", res, a.reported())
	}
	if res := set.Run(ctx, "mcp__docs__ask", `{"question":"Which colour?"}`); res.Output != "the person answered: green" {
		t.Errorf("ask: %+v", res)
	}
	if res := set.Run(ctx, "mcp__docs__swap_tools", `{}`); res.IsError {
		t.Fatalf("swap_tools: %s", res.Output)
	}
	deadline := time.Now().Add(patience)
	for !s.Refresh(context.Background()) {
		if time.Now().After(deadline) {
			t.Fatalf("Refresh never saw the change; warnings: %s", w)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(w.String(), `MCP server "docs" changed its tools: now also offers shout; no longer offers echo`) {
		t.Errorf("warnings: %s", w)
	}
}

func TestToolDiff(t *testing.T) {
	tool := func(name, desc string) *sdk.Tool {
		return &sdk.Tool{Name: name, Description: desc, InputSchema: map[string]any{"type": "object"}}
	}
	added, removed, altered := toolDiff(
		[]*sdk.Tool{tool("echo", "Echo."), tool("add", "Add."), tool("keep", "Keep.")},
		[]*sdk.Tool{tool("keep", "Keep."), tool("add", "Add two numbers."), tool("shout", "Shout.")})
	if fmt.Sprint(added, removed, altered) != "[shout] [echo] [add]" {
		t.Errorf("added %v, removed %v, altered %v", added, removed, altered)
	}
}

// A call that changed the server's tools is seen by the next Refresh at
// once, whenever the server's notification comes: the SDK hands it over
// on a goroutine of its own, which the call's result may overtake.
func TestACallThatChangedToolsIsSeenAtOnce(t *testing.T) {
	srv, _ := testServer(t, "tracker", nil)
	set, s, w := startSet(t, []Server{srv}, nil)
	if res := set.Run(context.Background(), "mcp__tracker__swap_tools", `{}`); res.IsError {
		t.Fatalf("swap_tools: %s", res.Output)
	}
	if !s.Refresh(context.Background()) {
		t.Fatalf("the Refresh after the call did not see the change; warnings: %s", w)
	}
	if res := set.Run(context.Background(), "mcp__tracker__echo", `{"text":"x"}`); !res.IsError {
		t.Errorf("echo still answers: %+v", res)
	}
	if s.Refresh(context.Background()) {
		t.Error("the Refresh after a call that changed nothing saw a change")
	}
}
