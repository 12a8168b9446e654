package gateway

import (
	"bytes"
	"context"
	"errors"
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
