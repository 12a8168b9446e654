package llm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"sync"
)

// exchange is one cassette line: a request and the response it got.
type exchange struct {
	Scope    string    `json:"scope,omitempty"`
	Request  Request   `json:"request"`
	Response *Response `json:"response"`
}

// NewRecorder returns a Model that forwards to m and appends each
// successful exchange to w as one JSON line {"request":…,"response":…}.
// Failed calls are not recorded, so a cassette replays a clean run.
// Scope tags the lines, so several processes (the harness's phases) can
// share one cassette and each replays only its own exchanges.
func NewRecorder(m Model, w io.Writer, scope string) Model {
	return &recorder{m: m, w: w, scope: scope}
}

type recorder struct {
	m     Model
	mu    sync.Mutex // serializes writes so lines never interleave
	w     io.Writer
	scope string
}

func (r *recorder) Stream(ctx context.Context, req Request, onText func(string)) (*Response, error) {
	resp, err := r.m.Stream(ctx, req, onText)
	if err != nil {
		return nil, err
	}
	line, err := json.Marshal(exchange{Scope: r.scope, Request: withoutImageData(req), Response: resp})
	if err != nil {
		return nil, fmt.Errorf("record model exchange: %w", err)
	}
	line = append(line, '\n')
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.w.Write(line); err != nil {
		// The user asked for a cassette; a silent gap would break replay.
		return nil, fmt.Errorf("record model exchange: %w", err)
	}
	return resp, nil
}

// NewReplayer reads a cassette written by NewRecorder and returns a Model
// that answers calls in order without any network. Each incoming request
// must equal the recorded one, except for the model name; otherwise the
// call fails with an *Error of KindReplay naming the first difference.
// Only the exchanges recorded with the same scope are used.
func NewReplayer(r io.Reader, scope string) (Model, error) {
	br := bufio.NewReader(r)
	var exs []exchange
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var ex exchange
			if jerr := json.Unmarshal(line, &ex); jerr != nil {
				return nil, fmt.Errorf("replay cassette line %d: %w", n, jerr)
			}
			if ex.Response == nil {
				return nil, fmt.Errorf("replay cassette line %d: no response", n)
			}
			if ex.Scope == scope {
				exs = append(exs, ex)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read replay cassette: %w", err)
		}
	}
	return &replayer{exchanges: exs}, nil
}

type replayer struct {
	mu        sync.Mutex
	exchanges []exchange
	next      int
}

func (r *replayer) Stream(ctx context.Context, req Request, onText func(string)) (*Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("model request: %w", err)
	}
	r.mu.Lock()
	i := r.next
	if i >= len(r.exchanges) {
		r.mu.Unlock()
		return nil, &Error{Kind: KindReplay, Message: fmt.Sprintf("replay: cassette has only %d exchanges", len(r.exchanges))}
	}
	ex := r.exchanges[i]
	if path, got, want, ok := diffRequests(req, ex.Request); !ok {
		r.mu.Unlock()
		return nil, &Error{Kind: KindReplay, Message: fmt.Sprintf(
			"replay: request %d differs from the cassette at %s: got %s want %s", i+1, path, got, want)}
	}
	r.next++
	r.mu.Unlock()

	resp := *ex.Response
	// Copy the calls so callers can't change the cassette.
	resp.Message.ToolCalls = append([]ToolCall(nil), resp.Message.ToolCalls...)
	if onText != nil && resp.Message.Content != "" {
		onText(resp.Message.Content)
	}
	return &resp, nil
}

// withoutImageData is req as a cassette keeps it: each image by its
// sha256, without its bytes, which the store keeps once.
func withoutImageData(req Request) Request {
	msgs := make([]Message, len(req.Messages))
	for i, m := range req.Messages {
		if len(m.Images) > 0 {
			m.Images = append([]Image(nil), m.Images...)
			for j := range m.Images {
				m.Images[j].Data = nil
			}
		}
		msgs[i] = m
	}
	req.Messages = msgs
	return req
}

// diffRequests compares two requests as JSON, ignoring the model, and
// returns the path of the first difference with both values rendered.
func diffRequests(got, want Request) (path, gotV, wantV string, same bool) {
	got, want = withoutImageData(got), withoutImageData(want)
	got.Model, want.Model = "", ""
	g, err1 := toGeneric(got)
	w, err2 := toGeneric(want)
	if err := errors.Join(err1, err2); err != nil {
		return "request", err.Error(), "a valid request", false
	}
	return diff("", g, w)
}

func toGeneric(v any) (any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	err = dec.Decode(&out)
	return out, err
}

// absent marks a missing map key or array element.
type absent struct{}

func diff(path string, got, want any) (string, string, string, bool) {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			break
		}
		keys := make([]string, 0, len(w)+len(g))
		for k := range w {
			keys = append(keys, k)
		}
		for k := range g {
			if _, ok := w[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			gv, gok := g[k]
			wv, wok := w[k]
			if !gok {
				gv = absent{}
			}
			if !wok {
				wv = absent{}
			}
			if p, a, b, same := diff(join(path, k), gv, wv); !same {
				return p, a, b, false
			}
		}
		return "", "", "", true
	case []any:
		g, ok := got.([]any)
		if !ok {
			if got == nil && len(w) == 0 {
				return "", "", "", true
			}
			break
		}
		for i := 0; i < max(len(g), len(w)); i++ {
			var gv, wv any = absent{}, absent{}
			if i < len(g) {
				gv = g[i]
			}
			if i < len(w) {
				wv = w[i]
			}
			if p, a, b, same := diff(path+"["+strconv.Itoa(i)+"]", gv, wv); !same {
				return p, a, b, false
			}
		}
		return "", "", "", true
	case nil:
		if g, ok := got.([]any); ok && len(g) == 0 {
			return "", "", "", true
		}
	}
	if sameScalar(got, want) {
		return "", "", "", true
	}
	if path == "" {
		path = "request"
	}
	a, b := render(got, want)
	return path, a, b, false
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func sameScalar(a, b any) bool {
	switch a.(type) {
	case map[string]any, []any:
		return false
	}
	switch b.(type) {
	case map[string]any, []any:
		return false
	}
	return a == b
}

// maxShown bounds a value shown in a replay error.
const maxShown = 60

// render shows both values; for two long strings it shows the window
// around the first differing byte, where the eye needs to look.
func render(got, want any) (string, string) {
	gs, gok := got.(string)
	ws, wok := want.(string)
	if gok && wok && (len(gs) > maxShown || len(ws) > maxShown) {
		at := 0
		for at < len(gs) && at < len(ws) && gs[at] == ws[at] {
			at++
		}
		start := max(0, at-maxShown/3)
		return window(gs, start), window(ws, start)
	}
	return shown(got), shown(want)
}

func window(s string, start int) string {
	for start > 0 && start < len(s) && !isRuneStart(s[start]) {
		start--
	}
	prefix := ""
	if start > 0 {
		prefix = "…"
	}
	end := min(len(s), start+maxShown)
	for end < len(s) && !isRuneStart(s[end]) {
		end--
	}
	suffix := ""
	if end < len(s) {
		suffix = "…"
	}
	return strconv.Quote(prefix + s[start:end] + suffix)
}

func shown(v any) string {
	switch v := v.(type) {
	case absent:
		return "nothing"
	case string:
		if len(v) > maxShown {
			return window(v, 0)
		}
		return strconv.Quote(v)
	}
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	s := string(data)
	if len(s) > maxShown {
		cut := maxShown
		for cut > 0 && !isRuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}
