package console

import (
	"fmt"
	"io"
	"sync"
	"time"
)

var frames = []rune("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏")

// spinner animates one status line on a terminal. A nil *spinner is a
// valid no-op, which is what non-terminal output uses.
type spinner struct {
	w    io.Writer
	mu   sync.Mutex
	done chan struct{}
	wg   sync.WaitGroup
}

func newSpinner(w io.Writer) *spinner { return &spinner{w: w} }

func (s *spinner) start(label string) {
	if s == nil {
		return
	}
	s.stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done = make(chan struct{})
	s.wg.Add(1)
	go s.spin(label, s.done)
}

func (s *spinner) spin(label string, done chan struct{}) {
	defer s.wg.Done()
	began := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-done:
			fmt.Fprint(s.w, "\r\033[K")
			return
		case <-tick.C:
			fmt.Fprintf(s.w, "\r\033[K%c %s (%ds)", frames[i%len(frames)], label, int(time.Since(began).Seconds()))
		}
	}
}

// stop clears the spinner line and waits until it is gone, so output that
// follows never interleaves with it.
func (s *spinner) stop() {
	if s == nil {
		return
	}
	s.mu.Lock()
	if s.done != nil {
		close(s.done)
		s.done = nil
	}
	s.mu.Unlock()
	s.wg.Wait()
}
