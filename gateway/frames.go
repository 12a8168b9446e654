package gateway

import (
	"bufio"
	"encoding/binary"
	"net"
	"net/http"
	"sync"
	"time"
)

// controlFrameMax is the longest control frame a server sends: a 2-byte
// header and at most 125 bytes of payload (RFC 6455, 5.5).
const controlFrameMax = 2 + 125

// frameConn is a WebSocket's socket as the gateway writes to it. The
// library reads the client's frames and writes its own control frames
// (pings, pongs, the close frame) through it; the gateway writes its text
// frames straight to the socket, header and payload in one system call,
// without the library's per-frame locking and buffering, which cost a
// quarter of a frame's time when one event goes to a thousand clients.
// Every write is whole under one lock, so frames never interleave: a
// control frame reaches Write in one piece, since the library flushes
// each frame and its buffer holds the longest.
type frameConn struct {
	net.Conn

	mu  sync.Mutex
	buf []byte // the frame being written
	// closed is set once a close frame went out: nothing may follow it.
	closed bool
}

// Write is the library's way out: one frame per call.
func (f *frameConn) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(p) > 0 && p[0]&0x0f == 0x8 {
		f.closed = true
	}
	return f.Conn.Write(p)
}

// writeText sends one unfragmented, unmasked text frame.
func (f *frameConn) writeText(payload []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writeTextLocked(payload)
}

// writeTextWithin is writeText, given up after d.
func (f *frameConn) writeTextWithin(payload []byte, d time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.Conn.SetWriteDeadline(time.Now().Add(d)); err != nil {
		return err
	}
	defer f.Conn.SetWriteDeadline(time.Time{}) //nolint:errcheck
	return f.writeTextLocked(payload)
}

func (f *frameConn) writeTextLocked(payload []byte) error {
	if f.closed {
		return net.ErrClosed
	}
	f.buf = append(f.buf[:0], 0x81)
	switch n := len(payload); {
	case n < 126:
		f.buf = append(f.buf, byte(n))
	case n <= 0xffff:
		f.buf = binary.BigEndian.AppendUint16(append(f.buf, 126), uint16(n))
	default:
		f.buf = binary.BigEndian.AppendUint64(append(f.buf, 127), uint64(n))
	}
	f.buf = append(f.buf, payload...)
	_, err := f.Conn.Write(f.buf)
	if cap(f.buf) > 64<<10 {
		f.buf = nil // a large answer's storage is not kept
	}
	return err
}

// hijackInto hands the library the connection as a frameConn when it
// takes the connection over from the HTTP server.
type hijackInto struct {
	http.ResponseWriter
	conn *frameConn
}

func (h *hijackInto) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	// The HTTP server's answer (101) is sent by now; the library's own
	// writes go through the frameConn. They are control frames only, a
	// payload of at most 125 bytes: the buffer holds one whole, so each
	// reaches Write in one piece.
	h.conn = &frameConn{Conn: c}
	brw.Writer = bufio.NewWriterSize(h.conn, controlFrameMax)
	return h.conn, brw, nil
}
