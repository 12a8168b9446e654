package gateway

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"agent/gateway/api"
	"agent/store"
)

// FuzzFrame feeds arbitrary bytes to the path a client's frame takes
// after the WebSocket read: parseFrame, the connect params of the
// handshake, the run.start checks and option resolution, and handle for
// every method, with the answer encoded as reply encodes it. The server
// is built but not started and is stopping, so nothing listens and no
// run is queued; sessions and jobs are written to a store in a temp dir.
func FuzzFrame(f *testing.F) {
	for _, seed := range []string{
		`{"type":"req","id":"1","method":"connect","params":{"protocol":1,"token":"fuzz-token-0123456789"}}`,
		`{"type":"req","id":"2","method":"session.create","params":{"title":"t"}}`,
		`{"type":"req","id":"3","method":"run.start","params":{"session_id":"s","input":"echo hi","workspace":"/","options":{"base_url":"http://evil.example/v1","max_turns":-1,"timeout":"1m"},"idempotency_key":"k"}}`,
		`{"type":"req","id":"4","method":"run.start","params":{"input":"x","options":{"replay":"c.jsonl","allow_tools":["rm_rf"],"harness":true,"until":"u"}}}`,
		`{"type":"req","id":"5","method":"session.resume","params":{"session_id":"","after_seq":-1}}`,
		`{"type":"req","id":"6","method":"session.fork","params":{"session_id":"a","seq":-5,"title":"f"}}`,
		`{"type":"req","id":"7","method":"run.cancel","params":{"run_id":"r","mode":"x"}}`,
		`{"type":"req","id":"8","method":"checkpoint.rewind","params":{"run_id":"r","to":-1}}`,
		`{"type":"req","id":"9","method":"job.create","params":{"name":"n","cron_expr":"@every 1s","prompt":"{{.JobName}}","policy":{"overlap":"nope","retry":{"max_attempts":-1}}}}`,
		`{"type":"req","id":"10","method":"job.update","params":{"job_id":"n","policy":{"timeout":"x"}}}`,
		`{"type":"req","id":"11","method":"session.list","params":{"limit":-3}}`,
		`{"type":"req","id":"12","method":"run.resume","params":{"run_id":"r","resend_unknown":true}}`,
		`{"type":"req","id":"13","method":"run.start","params":"nope"}`,
		`{"type":"req"}`, `[]`, `null`, `{"type":"req","id":{},"method":1}`, "\xff\xfe",
	} {
		f.Add([]byte(seed))
	}
	s, c := fuzzServer(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		req, e := parseFrame(data)
		if e != nil {
			if e.Code != api.CodeBadRequest {
				t.Fatalf("a malformed frame: %v", e)
			}
			return
		}
		var cp api.ConnectParams
		_ = decode(req.Params, &cp)
		var rp api.RunStartParams
		if decode(req.Params, &rp) == nil {
			if checkRunFields(rp) == nil {
				_, _, _ = s.resolve(rp)
			}
		}
		result, _, err := c.handle(req) // then (a stream) needs a socket: not run
		res := api.Response{Type: api.FrameRes, ID: req.ID, OK: err == nil, Result: result}
		if err != nil {
			res.Error = toError(err)
			if res.Error == nil || res.Error.Code == "" {
				t.Fatalf("%s: error %v has no code", req.Method, err)
			}
		}
		if _, err := json.Marshal(res); err != nil {
			t.Fatalf("%s: encode the answer: %v", req.Method, err)
		}
		c.reset()
	})
}

// fuzzServer is a gateway that was never started and is stopping, with a
// connection to call handle on.
func fuzzServer(f *testing.F) (*Server, *conn) {
	dir := f.TempDir()
	db, err := store.Open(filepath.Join(dir, "agent.db"))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { db.Close() })
	s, err := New(Config{
		Listen: "127.0.0.1:0", Token: "fuzz-token-0123456789", DB: db, DefaultWorkspace: dir, Home: dir,
		Model:     ModelDefaults{Name: "fake", BaseURL: "http://127.0.0.1:9/v1"},
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		Scheduler: &SchedulerConfig{},
	})
	if err != nil {
		f.Fatal(err)
	}
	if err := s.Stop(context.Background()); err != nil { // run.start and run.resume: unavailable
		f.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.Cleanup(cancel)
	c := &conn{s: s, id: 1, ctx: ctx, cancel: cancel, subs: map[string]*attachment{},
		protect: func() func() { return func() {} }}
	return s, c
}

// reset detaches the sessions a request attached, so they do not pile up.
func (c *conn) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, a := range c.subs {
		if sess, ok := c.s.sessions.loaded(id); ok {
			sess.hub.unsubscribe(a.sub)
		}
		delete(c.subs, id)
	}
	c.s.sessions.releaseAll(c.id)
}
