package console

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// screen is a small terminal for tests: it applies what a display writes
// (text, \r, \n, ESC[K, ESC[nA, ESC[J) to a grid of lines, as a terminal
// shows it. Give it as both writers of a display, as stdout and stderr
// share one terminal. Like a terminal, ESC[nA moves up and keeps the
// column.
type screen struct {
	mu       sync.Mutex
	lines    [][]rune
	row, col int
	esc      []rune // the escape sequence being read, after ESC
	inEsc    bool
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range string(p) {
		s.put(r)
	}
	return len(p), nil
}

func (s *screen) put(r rune) {
	if s.inEsc {
		s.esc = append(s.esc, r)
		switch {
		case len(s.esc) == 1 && r != '[':
			s.inEsc = false
		case len(s.esc) > 1 && r >= '@' && r <= '~':
			s.apply(string(s.esc[1:len(s.esc)-1]), r)
			s.inEsc = false
		}
		return
	}
	switch r {
	case 0x1b:
		s.inEsc, s.esc = true, s.esc[:0]
	case '\r':
		s.col = 0
	case '\n':
		s.row++
		s.col = 0
	default:
		for len(s.lines) <= s.row {
			s.lines = append(s.lines, nil)
		}
		line := s.lines[s.row]
		for len(line) <= s.col {
			line = append(line, ' ')
		}
		line[s.col] = r
		s.lines[s.row] = line
		s.col++
	}
}

func (s *screen) apply(param string, cmd rune) {
	n := 1
	if v, err := strconv.Atoi(param); err == nil {
		n = v
	}
	switch cmd {
	case 'K':
		s.truncate()
	case 'J':
		s.truncate()
		if len(s.lines) > s.row+1 {
			s.lines = s.lines[:s.row+1]
		}
	case 'A':
		s.row = max(s.row-n, 0)
	}
}

// truncate erases from the cursor to the end of its line.
func (s *screen) truncate() {
	if s.row < len(s.lines) && len(s.lines[s.row]) > s.col {
		s.lines[s.row] = s.lines[s.row][:s.col]
	}
}

// text is what the screen shows, trailing blanks trimmed.
func (s *screen) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, l := range s.lines {
		out = append(out, strings.TrimRight(string(l), " "))
	}
	return strings.TrimRight(strings.Join(out, "\n"), "\n")
}

// cursorLine is the line the cursor is on.
func (s *screen) cursorLine() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.row >= len(s.lines) {
		return ""
	}
	return strings.TrimRight(string(s.lines[s.row]), " ")
}

// echo is the terminal echoing what the user typed, e.g. "^C".
func (s *screen) echo(text string) { _, _ = s.Write([]byte(text)) }

func TestScreen(t *testing.T) {
	t.Parallel()
	var s screen
	s.echo("abc\ndef\n\rxy\033[K\n")
	s.echo("\033[2A\033[J" + "Z")
	if got := s.text(); got != "abc\nZ" {
		t.Errorf("screen = %q", got)
	}
	s.echo("\r\033[Kline\n^C")
	s.echo("\033[1A\033[J") // up from column 2 keeps the column
	if got := s.text(); got != "abc\nli" {
		t.Errorf("screen = %q", got)
	}
}

// clock is a fake time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
