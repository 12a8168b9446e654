package gateway

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// FanoutClientsEnv, when set to "ADDR,SESSION,AFTER_SEQ,N,TOKEN,DELIVERIES",
// makes the test binary BenchmarkFanout's client process (TestMain calls
// FanoutClients).
const FanoutClientsEnv = "AGENT_BENCH_FANOUT_CLIENTS"

// FanoutClients attaches N WebSocket clients to a session after AFTER_SEQ
// (DELIVERIES frames will come to them in all), says "ready", then
// answers each number read from stdin with "ok" once that many frames
// have arrived in all. At the end of stdin it closes every client
// and writes the delivery latencies as JSON. It returns the exit code.
func FanoutClients() int {
	parts := strings.Split(os.Getenv(FanoutClientsEnv), ",")
	if len(parts) != 6 {
		fmt.Fprintln(os.Stderr, FanoutClientsEnv+" must be ADDR,SESSION,AFTER_SEQ,N,TOKEN,DELIVERIES")
		return 2
	}
	addr, sessionID, afterSeq, token := parts[0], parts[1], parts[2], parts[4]
	n, _ := strconv.Atoi(parts[3])
	deliveries, _ := strconv.Atoi(parts[5])

	var received atomic.Int64
	var target atomic.Int64
	target.Store(1 << 62)
	reached := make(chan struct{}, 1)
	conns := make([]net.Conn, 0, n)
	clients := map[int32]*rawClient{}
	for range n {
		c, cl, err := rawAttach(addr, sessionID, afterSeq, token)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fanout client:", err)
			return 1
		}
		conns = append(conns, c)
		clients[int32(cl.fd)] = cl
	}
	// One loop reads every socket as it becomes readable: the clients'
	// share of the CPU is a read per delivery, no goroutine wake-ups.
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fanout client: epoll:", err)
		return 1
	}
	for fd := range clients {
		if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, int(fd), &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: fd}); err != nil {
			fmt.Fprintln(os.Stderr, "fanout client: epoll:", err)
			return 1
		}
	}
	// Room for every latency up front: the loop allocates nothing, so
	// the clients make no collection (and no pause) while events come.
	lat := make([]int64, 0, deliveries)
	var stop atomic.Bool
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		runtime.LockOSThread()
		events := make([]syscall.EpollEvent, 1024)
		buf := make([]byte, 64<<10)
		for !stop.Load() {
			ready, err := syscall.EpollWait(epfd, events, 100)
			if err != nil && err != syscall.EINTR {
				fmt.Fprintln(os.Stderr, "fanout client: epoll_wait:", err)
				return
			}
			for _, ev := range events[:max(ready, 0)] {
				cl := clients[ev.Fd]
				// The socket does not block: a raw read spares the
				// scheduler's bookkeeping of a system call.
				r, _, errno := syscall.RawSyscall(syscall.SYS_READ, uintptr(cl.fd), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
				if errno == syscall.EAGAIN || errno == syscall.EINTR {
					continue
				}
				if errno != 0 || r == 0 {
					syscall.EpollCtl(epfd, syscall.EPOLL_CTL_DEL, cl.fd, nil) //nolint:errcheck
					continue
				}
				now := time.Now()
				frames := cl.frames(buf[:r], func(payload []byte) {
					if sent, ok := sentAt(payload); ok {
						lat = append(lat, now.Sub(sent).Microseconds())
					}
				})
				if v := received.Add(int64(frames)); frames > 0 && v >= target.Load() {
					select {
					case reached <- struct{}{}:
					default:
					}
				}
			}
		}
	}()
	fmt.Println("ready")
	cpuAtReady := cpuTime()

	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		want, err := strconv.ParseInt(in.Text(), 10, 64)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fanout client: not a number:", in.Text())
			return 2
		}
		// No wake-up is missed: the loop adds to received before it loads
		// target, and this stores target before it loads received (Go's
		// atomics are sequentially consistent), so one of the two sees the
		// other. A timer here instead woke this goroutine, and a second
		// thread with it, every millisecond while events came: CPU taken
		// from the gateway and the loop, 1-2 µs a delivery.
		target.Store(want)
		for received.Load() < want {
			<-reached
		}
		fmt.Println("ok")
	}
	cpu := cpuTime() - cpuAtReady
	stop.Store(true)
	<-loopDone
	for _, c := range conns {
		c.Close()
	}
	slices.Sort(lat)
	out := fanoutLatency{Count: int64(len(lat)), CPU: cpu.Microseconds()}
	if len(lat) > 0 {
		out.P50, out.P99 = lat[len(lat)/2], lat[len(lat)*99/100]
	}
	data, _ := json.Marshal(out)
	fmt.Println(string(data))
	return 0
}

// cpuTime is the CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rawClient is one client's socket and the part of a frame it has read.
type rawClient struct {
	fd      int
	partial []byte
}

// frames hands each text frame data completes to text, answers pings,
// and returns how many text frames there were. The part of a frame at
// the end of data is kept for the next read.
func (cl *rawClient) frames(data []byte, text func([]byte)) int {
	if len(cl.partial) > 0 {
		data = append(cl.partial, data...)
	}
	n := 0
	for len(data) >= 2 {
		size, head := int(data[1]&0x7f), 2
		switch size {
		case 126:
			size, head = 1<<62, 4
			if len(data) >= 4 {
				size = int(binary.BigEndian.Uint16(data[2:4]))
			}
		case 127:
			size, head = 1<<62, 10
			if len(data) >= 10 {
				size = int(binary.BigEndian.Uint64(data[2:10]))
			}
		}
		if len(data)-head < size {
			break
		}
		payload := data[head : head+size]
		switch data[0] & 0x0f {
		case 0x1:
			text(payload)
			n++
		case 0x9:
			syscall.Write(cl.fd, append([]byte{0x8a, 0x80 | byte(len(payload)), 0, 0, 0, 0}, payload...)) //nolint:errcheck
		}
		data = data[head+size:]
	}
	cl.partial = append(cl.partial[:0], data...)
	return n
}

// rawAttach opens a WebSocket, connects and resumes the session, with
// nothing but the socket: the least a client can cost.
func rawAttach(addr, sessionID, afterSeq, token string) (net.Conn, *rawClient, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	cl, err := rawUpgrade(c, addr)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	buf := make([]byte, 4096)
	for _, req := range []string{
		`{"type":"req","id":"1","method":"connect","params":{"protocol":1,"token":"` + token + `"}}`,
		`{"type":"req","id":"2","method":"session.resume","params":{"session_id":"` + sessionID + `","after_seq":` + afterSeq + `}}`,
	} {
		if err := rawWriteText(c, []byte(req)); err != nil {
			c.Close()
			return nil, nil, err
		}
		var reply []byte
		for reply == nil {
			n, err := c.Read(buf)
			if err != nil {
				c.Close()
				return nil, nil, fmt.Errorf("%s: %v", req, err)
			}
			cl.frames(buf[:n], func(p []byte) { reply = slices.Clone(p) })
		}
		if !bytes.Contains(reply, []byte(`"ok":true`)) {
			c.Close()
			return nil, nil, fmt.Errorf("%s: %s", req, reply)
		}
	}
	return c, cl, nil
}

// rawUpgrade upgrades c to a WebSocket and returns its client, read from
// then on without the runtime's poller.
func rawUpgrade(c net.Conn, addr string) (*rawClient, error) {
	if _, err := io.WriteString(c, upgradeRequest(addr)); err != nil {
		return nil, err
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	switch {
	case resp.StatusCode != http.StatusSwitchingProtocols:
		return nil, fmt.Errorf("upgrade: %s", resp.Status)
	case br.Buffered() > 0:
		return nil, errors.New("a frame before the first request")
	}
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return nil, err
	}
	cl := &rawClient{}
	if err := raw.Control(func(fd uintptr) { cl.fd = int(fd) }); err != nil {
		return nil, err
	}
	return cl, nil
}

// rawWriteText sends a client's text frame, masked with a zero key (the
// payload is then sent as it is).
func rawWriteText(c net.Conn, p []byte) error {
	frame, err := clientText(p)
	if err != nil {
		return err
	}
	_, err = c.Write(frame)
	return err
}

// clientText is a client's text frame of p, masked with a zero key.
func clientText(p []byte) ([]byte, error) {
	if len(p) > 0xffff {
		return nil, errors.New("frame too long")
	}
	hdr := []byte{0x81, 0x80 | 126, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint16(hdr[2:], uint16(len(p)))
	return append(hdr, p...), nil
}

// upgradeRequest asks addr to upgrade /ws to a WebSocket.
func upgradeRequest(addr string) string {
	return "GET /ws HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
}

// sentAt reads the publish time the benchmark puts in the event's text,
// without decoding the whole frame.
func sentAt(frame []byte) (time.Time, bool) {
	_, rest, ok := bytes.Cut(frame, []byte(`"text":"`))
	if !ok {
		return time.Time{}, false
	}
	text, _, _ := bytes.Cut(rest, []byte(`"`))
	// Digit by digit: a conversion to string would allocate at every
	// delivery, and the collections that brings would be the clients'
	// pauses in the latencies.
	var ns int64
	for _, d := range text {
		if d < '0' || d > '9' {
			return time.Time{}, false
		}
		ns = ns*10 + int64(d-'0')
	}
	return time.Unix(0, ns), len(text) > 0
}
