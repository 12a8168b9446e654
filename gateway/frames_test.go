package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// Text frames written straight to the socket reach a standard client
// whole and in order, at every length encoding, while the library writes
// its pings and pongs on the same connection.
func TestFramesWrittenStraightToTheSocket(t *testing.T) {
	t.Parallel()
	sizes := []int{0, 125, 126, 300, 65535, 65536, 300_000}
	payload := func(i, n int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, n) }
	serverDone := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hj := &hijackInto{ResponseWriter: w}
		ws, err := websocket.Accept(hj, r, nil)
		if err != nil {
			serverDone <- err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		go func() { _, _, _ = ws.Read(ctx) }() // reads the client's pings (the library answers them) and its close
		var pings sync.WaitGroup
		pings.Add(1)
		go func() {
			defer pings.Done()
			for range 20 {
				if ws.Ping(ctx) != nil {
					return
				}
			}
		}()
		for range 20 {
			for i, n := range sizes {
				if err := hj.conn.writeText(payload(i, n)); err != nil {
					serverDone <- err
					return
				}
			}
		}
		pings.Wait()
		serverDone <- ws.Close(websocket.StatusNormalClosure, "done")
	}))
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(1 << 20)
	go func() {
		for range 20 {
			if c.Ping(ctx) != nil {
				return
			}
		}
	}()
	for round := range 20 {
		for i, n := range sizes {
			typ, got, err := c.Read(ctx)
			if err != nil {
				t.Fatalf("round %d, frame of %d bytes: %v", round, n, err)
			}
			if typ != websocket.MessageText || !bytes.Equal(got, payload(i, n)) {
				t.Fatalf("round %d: got %d bytes of type %v, want %d", round, len(got), typ, n)
			}
		}
	}
	if _, _, err := c.Read(ctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("after the frames: %v, want the close", err)
	}
	if err := <-serverDone; err != nil {
		t.Error(err)
	}
}

// Once the library has sent the close frame, no text frame follows it.
func TestNoFrameAfterTheCloseFrame(t *testing.T) {
	t.Parallel()
	server, client := net.Pipe()
	defer client.Close()
	f := &frameConn{Conn: server}
	go func() { _, _ = io.Copy(io.Discard, client) }()
	if err := f.writeText([]byte("before")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte{0x88, 0x02, 0x03, 0xe8}); err != nil { // close, 1000
		t.Fatal(err)
	}
	if err := f.writeText([]byte("after")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("a text frame after the close frame: %v", err)
	}
}

// A frame written without blocking goes out whole or not at all from the
// client's side: when the socket is full, what it did not take of a frame
// goes before the next write, and a frame it took none of is not sent.
func TestFramesWrittenWithoutBlocking(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	f := newFrameConn(server)
	if f.raw == nil {
		t.Fatal("a TCP connection has no raw socket")
	}

	// The client reads nothing yet: the socket fills. Three frames a write.
	var sent []string
	payload := func(i int) []byte { return []byte(fmt.Sprintf("%06d%s", i, strings.Repeat("x", 20_000))) }
	var b frameBatch
	partial := false
	for i := 0; ; i += 3 {
		if i > 100_000 {
			t.Fatal("the socket never filled")
		}
		b.reset()
		for k := range 3 {
			b.add(payload(i + k))
		}
		n, blocked := f.tryWrite(&b)
		for k := range n {
			sent = append(sent, string(payload(i+k)))
		}
		if !blocked {
			if n != 3 {
				t.Fatalf("%d frames of 3 sent, yet not blocked", n)
			}
			continue
		}
		if n > 0 && len(f.rest) > 0 {
			partial = true
			b.reset()
			b.add([]byte("next"))
			if n, blocked := f.tryWrite(&b); n != 0 || !blocked {
				t.Fatal("a frame was written before the rest of the one before it")
			}
		}
		break
	}

	t.Logf("%d frames sent before the socket was full; the last in part: %v", len(sent), partial)
	got := make(chan []string, 1)
	go func() {
		var frames []string
		cl := &rawClient{}
		buf := make([]byte, 64<<10)
		for len(frames) < len(sent)+1 {
			n, err := client.Read(buf)
			if err != nil {
				break
			}
			cl.frames(buf[:n], func(p []byte) { frames = append(frames, string(p)) })
		}
		got <- frames
	}()
	if err := f.writeText([]byte("last")); err != nil { // the rest first; blocks until the client reads
		t.Fatal(err)
	}
	frames := <-got
	want := append(sent, "last")
	if len(frames) != len(want) {
		t.Fatalf("the client got %d frames, want %d (partial write seen: %v)", len(frames), len(want), partial)
	}
	for i := range want {
		if frames[i] != want[i] {
			t.Fatalf("frame %d: got %.6q…, want %.6q…", i, frames[i], want[i])
		}
	}
}
