package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"agent/event"
	"agent/store"
)

// BenchmarkFanout publishes events in one session to 100 and 1,000
// attached WebSocket clients (in this process, over loopback) and reports
// the delivery latency from publish to a client's read (p50, p99), the
// events published per second and the deliveries (events × clients) per
// second. Events are message.delta, the token stream, with a
// message.completed every 256 that writes them to the store.
//
// window=1 publishes one event and waits until every client has it:
// the latency of one token reaching everyone. window=256 publishes 256 at
// once before waiting: the throughput under load (latency then includes
// the queue of the burst).
func BenchmarkFanout(b *testing.B) {
	for _, n := range []int{100, 1000} {
		for _, w := range []int{1, 256} {
			b.Run(fmt.Sprintf("clients=%d/window=%d", n, w), func(b *testing.B) { benchFanout(b, n, w) })
		}
	}
}

const flushEvery = 256

func benchFanout(b *testing.B, clients, window int) {
	dir := b.TempDir()
	db, err := store.Open(dir + "/agent.db")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	s, err := New(Config{
		Listen: "127.0.0.1:0", Token: "bench-token-0123456789", DB: db, DefaultWorkspace: dir,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), SubscriberBuffer: 4 * flushEvery,
		MaxConnections: 2 * clients, // more than the default
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer s.Stop(ctx)
	row, err := s.sessions.create(ctx, "bench", "")
	if err != nil {
		b.Fatal(err)
	}
	run := &store.Run{ID: "bench-run", SessionID: row.ID, Workspace: dir}
	if err := db.CreateRun(ctx, run, "", 0); err != nil {
		b.Fatal(err)
	}
	sess, _, err := s.sessions.open(ctx, row.ID)
	if err != nil {
		b.Fatal(err)
	}

	var received atomic.Int64 // deliveries
	var latMu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	conns := make([]*websocket.Conn, clients)
	for i := range conns {
		ws := benchDial(b, s.Addr(), row.ID)
		conns[i] = ws
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, 1024)
			defer func() {
				latMu.Lock()
				lat = append(lat, local...)
				latMu.Unlock()
			}()
			for {
				_, data, err := ws.Read(ctx)
				if err != nil {
					return
				}
				now := time.Now()
				if sent, ok := sentAt(data); ok {
					local = append(local, now.Sub(sent))
				}
				received.Add(1)
			}
		}()
	}

	b.ResetTimer()
	start := time.Now()
	published := int64(0)
	for i := 0; i < b.N; i++ {
		e := event.New(event.MessageDelta, event.MessageDeltaData{Text: strconv.FormatInt(time.Now().UnixNano(), 10)})
		if (i+1)%flushEvery == 0 {
			e = event.New(event.MessageCompleted, event.MessageData{Role: "assistant", Text: strconv.FormatInt(time.Now().UnixNano(), 10)})
		}
		e.RunID = run.ID
		if _, err := sess.append(ctx, e); err != nil {
			b.Fatal(err)
		}
		published++
		if published%int64(window) == 0 || i == b.N-1 {
			want := published * int64(clients)
			for received.Load() < want {
				time.Sleep(50 * time.Microsecond)
			}
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	for _, ws := range conns {
		ws.CloseNow()
	}
	wg.Wait()
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
	b.ReportMetric(float64(published)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(received.Load())/elapsed.Seconds(), "deliveries/s")
}

func benchDial(b *testing.B, addr, sessionID string) *websocket.Conn {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws://"+addr+"/ws", nil)
	if err != nil {
		b.Fatal(err)
	}
	ws.SetReadLimit(1 << 20)
	for _, req := range []string{
		`{"type":"req","id":"1","method":"connect","params":{"protocol":1,"token":"bench-token-0123456789"}}`,
		`{"type":"req","id":"2","method":"session.resume","params":{"session_id":"` + sessionID + `","after_seq":0}}`,
	} {
		if err := ws.Write(ctx, websocket.MessageText, []byte(req)); err != nil {
			b.Fatal(err)
		}
		_, data, err := ws.Read(ctx)
		if err != nil || !bytes.Contains(data, []byte(`"ok":true`)) {
			b.Fatalf("%s: %s %v", req, data, err)
		}
	}
	return ws
}

// sentAt reads the publish time the benchmark puts in the event's text,
// without decoding the whole frame: the clients share the CPU with the
// gateway.
func sentAt(frame []byte) (time.Time, bool) {
	_, rest, ok := bytes.Cut(frame, []byte(`"text":"`))
	if !ok {
		return time.Time{}, false
	}
	text, _, _ := bytes.Cut(rest, []byte(`"`))
	ns, err := strconv.ParseInt(string(text), 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}
