package gateway

import (
	"bufio"
	"encoding/binary"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// controlFrameMax is the longest control frame a server sends: a 2-byte
// header and at most 125 bytes of payload (RFC 6455, 5.5).
const controlFrameMax = 2 + 125

// clientReadBuffer is the buffer a WebSocket's client is read through.
const clientReadBuffer = 512

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
	// raw is the socket itself, for writes that must not block (nil if the
	// connection is not one).
	raw syscall.RawConn

	mu  sync.Mutex
	buf []byte // the frame being written
	// rest is what the socket did not take of a frame written without
	// blocking: the next write sends it first.
	rest []byte
	// closed is set once a close frame went out: nothing may follow it.
	closed bool
	// tryWrite's raw write: what it writes, how much it wrote.
	out   []byte
	wrote int
	write func(fd uintptr) bool
}

func newFrameConn(c net.Conn) *frameConn {
	f := &frameConn{Conn: c}
	if sc, ok := c.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			f.raw = raw
			f.write = f.writeNow
		}
	}
	return f
}

// Write is the library's way out: one frame per call.
func (f *frameConn) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.flushLocked(); err != nil {
		return 0, err
	}
	if len(p) > 0 && p[0]&0x0f == 0x8 {
		f.closed = true
	}
	return f.Conn.Write(p)
}

// flush sends what the socket did not take of the last frame written
// without blocking; it may block.
func (f *frameConn) flush() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.flushLocked()
}

func (f *frameConn) flushLocked() error {
	if len(f.rest) == 0 {
		return nil
	}
	_, err := f.Conn.Write(f.rest)
	f.rest = nil
	return err
}

// frameBatch is text frames built for one write that must not block:
// the fan-out's, one per goroutine, its storage reused.
type frameBatch struct {
	buf  []byte
	ends []int // where each frame ends in buf
}

// batchMax is about how many bytes a batch holds: the most a socket
// usually takes at once.
const batchMax = 64 << 10

func (b *frameBatch) reset() {
	b.buf, b.ends = b.buf[:0], b.ends[:0]
}

func (b *frameBatch) add(payload []byte) {
	b.buf = appendText(b.buf, payload)
	b.ends = append(b.ends, len(b.buf))
}

func (b *frameBatch) full() bool { return len(b.buf) >= batchMax }

// tryWrite writes b's frames in one system call if the socket takes them
// now, without blocking. sent is how many are on their way: the socket
// took all of them, or part, and the rest of a frame it took only part of
// goes before any other write. blocked says a writer that may block must
// take over: the socket is full, another write is under way, or there is
// a rest to send.
func (f *frameConn) tryWrite(b *frameBatch) (sent int, blocked bool) {
	if f.raw == nil || !f.mu.TryLock() {
		return 0, true
	}
	defer f.mu.Unlock()
	if f.closed || len(f.rest) > 0 {
		return 0, true
	}
	f.out, f.wrote = b.buf, 0
	err := f.raw.Write(f.write)
	f.out = nil
	if err != nil || f.wrote == 0 {
		return 0, true
	}
	start := 0 // of frame i
	for i, end := range b.ends {
		switch {
		case f.wrote >= end:
			start = end
			continue
		case f.wrote > start:
			f.rest = append([]byte(nil), b.buf[f.wrote:end]...)
			return i + 1, true
		}
		return i, true
	}
	return len(b.ends), false
}

// writeNow is the raw write of f.out: it writes what the socket takes and
// never waits for it to take more.
func (f *frameConn) writeNow(fd uintptr) bool {
	for f.wrote < len(f.out) {
		n, err := syscall.Write(int(fd), f.out[f.wrote:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			break // full (EAGAIN), or gone: a blocking write finds out which
		}
		f.wrote += n
	}
	return true
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
	if err := f.flushLocked(); err != nil {
		return err
	}
	f.buf = appendText(f.buf[:0], payload)
	defer f.keepSmall()
	_, err := f.Conn.Write(f.buf)
	return err
}

// keepSmall drops a large frame's storage once it is written: an answer
// of many kilobytes is rare, and a client keeps its buffer.
func (f *frameConn) keepSmall() {
	if cap(f.buf) > 64<<10 {
		f.buf = nil
	}
}

// appendText appends to b one unfragmented, unmasked text frame of
// payload.
func appendText(b, payload []byte) []byte {
	b = append(b, 0x81)
	switch n := len(payload); {
	case n < 126:
		b = append(b, byte(n))
	case n <= 0xffff:
		b = binary.BigEndian.AppendUint16(append(b, 126), uint16(n))
	default:
		b = binary.BigEndian.AppendUint64(append(b, 127), uint64(n))
	}
	return append(b, payload...)
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
	h.conn = newFrameConn(c)
	brw.Writer = bufio.NewWriterSize(h.conn, controlFrameMax)
	// The HTTP server read the request through a 4 KiB buffer. A client
	// sends little (requests, pongs), and a read longer than the buffer
	// goes straight to the socket, so a small one does as well for the
	// rest of the connection. A client that sent a frame before the
	// upgrade's answer keeps the server's buffer, with that frame in it.
	if brw.Reader.Buffered() == 0 {
		brw.Reader = bufio.NewReaderSize(h.conn, clientReadBuffer)
	}
	return h.conn, brw, nil
}
