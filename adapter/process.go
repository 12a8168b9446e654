package adapter

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// controlWriter writes lines to the child's stdin, in order, from its own
// goroutine: a child that stops reading stdin can then never block the
// loop that watches its timeouts. Acks and cancels share it, so writes
// never interleave.
type controlWriter struct {
	w    io.WriteCloser
	wake chan struct{} // capacity 1: "the queue changed"
	done chan struct{} // closed when the goroutine returns

	mu     sync.Mutex
	queue  [][]byte
	closed bool
}

func newControlWriter(w io.WriteCloser) *controlWriter {
	c := &controlWriter{w: w, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go c.loop()
	return c
}

// send queues one line, newline included.
func (c *controlWriter) send(line []byte) {
	c.mu.Lock()
	if !c.closed {
		c.queue = append(c.queue, line)
	}
	c.mu.Unlock()
	c.poke()
}

func (c *controlWriter) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *controlWriter) loop() {
	defer close(c.done)
	broken := false
	for {
		c.mu.Lock()
		queue, closed := c.queue, c.closed
		c.queue = nil
		c.mu.Unlock()
		for _, line := range queue {
			if broken {
				break
			}
			// A write fails once the child is gone; nothing later can
			// reach it either.
			if _, err := c.w.Write(line); err != nil {
				broken = true
			}
		}
		if closed {
			return
		}
		<-c.wake
	}
}

// close closes stdin and waits for the goroutine. Run calls it after the
// child has exited, when os/exec has already closed stdin, so no write is
// left blocked.
func (c *controlWriter) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.poke()
	c.w.Close()
	<-c.done
}

// stderrLog is where the child's stderr goes: appended to the log file
// (best effort: a full disk must not stall the child on a blocked pipe)
// while the last bytes are kept for a crash Reason.
type stderrLog struct {
	file *os.File // nil without a LogPath

	mu   sync.Mutex
	max  int
	tail []byte
	cut  bool // tail lost its beginning
}

func openStderrLog(path string, max int) (*stderrLog, error) {
	l := &stderrLog{max: max}
	if path == "" {
		return l, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("runner log: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("runner log: %w", err)
	}
	l.file = f
	return l, nil
}

func (l *stderrLog) Write(p []byte) (int, error) {
	if l.file != nil {
		_, _ = l.file.Write(p)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(p) >= l.max {
		l.tail = append(l.tail[:0], p[len(p)-l.max:]...)
		l.cut = true
		return len(p), nil
	}
	l.tail = append(l.tail, p...)
	if over := len(l.tail) - l.max; over > 0 {
		n := copy(l.tail, l.tail[over:])
		l.tail = l.tail[:n]
		l.cut = true
	}
	return len(p), nil
}

// Tail returns the end of stderr, starting at a whole line.
func (l *stderrLog) Tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tail
	if l.cut {
		if i := bytes.IndexByte(t, '\n'); i >= 0 {
			t = t[i+1:]
		}
	}
	return strings.TrimSpace(string(t))
}

func (l *stderrLog) Close() error {
	if l.file == nil {
		return nil
	}
	return l.file.Close()
}

// processTree signals the child's process group and the groups of its
// descendants. A tool such as bash runs in a process group of its own
// (docs/PROTOCOL.md#tools), which a signal to the child's group alone would miss.
// Groups seen once are remembered: after SIGTERM the child may be gone
// while a tool that ignored SIGTERM lives on, no longer its descendant.
type processTree struct {
	pid    int          // the child: also its process group id
	self   int          // our own process group: never signalled
	exited atomic.Bool  // set once Wait has reaped the child
	groups map[int]bool // descendant process groups seen so far
}

func newProcessTree(pid int) *processTree {
	return &processTree{pid: pid, self: syscall.Getpgrp(), groups: map[int]bool{}}
}

func (t *processTree) signal(sig syscall.Signal) {
	// Once reaped, the child's pid may in theory belong to someone else:
	// walk its descendants only while it is ours.
	if !t.exited.Load() {
		for _, g := range descendantGroups(t.pid) {
			t.groups[g] = true
		}
	}
	_ = syscall.Kill(-t.pid, sig)
	for g := range t.groups {
		if g != t.pid && g != t.self && g > 1 {
			_ = syscall.Kill(-g, sig)
		}
	}
}

// descendantGroups returns the process groups of root's descendants, read
// from /proc. Best effort: without /proc it returns nil.
func descendantGroups(root int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	group := map[int]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, pgrp, ok := readStat(pid)
		if !ok {
			continue
		}
		children[ppid] = append(children[ppid], pid)
		group[pid] = pgrp
	}
	var groups []int
	seen := map[int]bool{}
	stack := []int{root}
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, c := range children[p] {
			if g := group[c]; !seen[g] {
				seen[g] = true
				groups = append(groups, g)
			}
			stack = append(stack, c)
		}
	}
	return groups
}

// readStat returns the parent pid and process group of pid.
func readStat(pid int) (ppid, pgrp int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// "pid (comm) state ppid pgrp ...": comm may hold spaces and parens.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 3 {
		return 0, 0, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgrp, err2 := strconv.Atoi(f[2])
	return ppid, pgrp, err1 == nil && err2 == nil
}
