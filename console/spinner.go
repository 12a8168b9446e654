package console

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
)

var frames = []rune("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏")

// spinTick is how often the spinner draws its next frame.
const spinTick = 100 * time.Millisecond

// spinner animates one status line on a terminal: a frame, what is being
// waited for and for how long. A nil *spinner is a valid no-op, which is
// what non-terminal output uses.
type spinner struct {
	w     io.Writer
	now   func() time.Time
	ticks func() (<-chan time.Time, func()) // nil: frames are drawn only by draw (tests)

	mu    sync.Mutex
	on    bool // a label is to be shown
	label string
	since time.Time
	frame int
	drawn bool          // a frame is on screen
	quit  chan struct{} // closed to stop the goroutine drawing frames
	done  chan struct{} // closed once it has returned
}

func newSpinner(w io.Writer) *spinner {
	return &spinner{w: w, now: time.Now, ticks: func() (<-chan time.Time, func()) {
		t := time.NewTicker(spinTick)
		return t.C, t.Stop
	}}
}

// show keeps label on screen, with the time elapsed since since. Showing
// what is already shown changes nothing, so a wait that outlasts several
// events keeps one line and one count.
func (s *spinner) show(label string, since time.Time) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.label, s.since, s.on = label, since, true
	if s.quit != nil || s.ticks == nil {
		return
	}
	tick, stop := s.ticks()
	s.quit, s.done = make(chan struct{}), make(chan struct{})
	go s.spin(tick, stop, s.quit, s.done)
}

func (s *spinner) spin(tick <-chan time.Time, stop func(), quit, done chan struct{}) {
	defer close(done)
	defer stop()
	for {
		select {
		case <-quit:
			return
		case <-tick:
			s.draw()
		}
	}
}

// draw writes the next frame over the current one.
func (s *spinner) draw() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.on {
		return
	}
	secs := int(s.now().Sub(s.since) / time.Second)
	fmt.Fprintf(s.w, "\r\033[K%c %s (%ds)", frames[s.frame%len(frames)], s.label, max(secs, 0))
	s.frame++
	s.drawn = true
}

// hide clears the spinner line and returns once no frame can be drawn
// any more, so output that follows never interleaves with it.
func (s *spinner) hide() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.on = false
	if s.drawn {
		fmt.Fprint(s.w, "\r\033[K")
		s.drawn = false
	}
	quit, done := s.quit, s.done
	s.quit, s.done = nil, nil
	s.mu.Unlock()
	if quit != nil {
		close(quit)
		<-done
	}
}

// formatDuration is the one way this package shows a duration: to a
// tenth of a second below a minute ("0.1s", "1.5s", "42s"), to the second
// above ("1m5s").
func formatDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	if r := d.Round(100 * time.Millisecond); r < time.Minute {
		return strings.TrimSuffix(strconv.FormatFloat(r.Seconds(), 'f', 1, 64), ".0") + "s"
	}
	return d.Round(time.Second).String()
}
