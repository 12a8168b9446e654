package chat

import (
	"bytes"
	"errors"
	"io"
	"sync"
	"sync/atomic"
)

// newline is how a line break within a message shows in the editor, which
// edits one line: Ctrl-J, Alt-Enter and a pasted line break put one in, and
// the message sent has "\n" there.
const newline = '↵'

// Escapes of a terminal in bracketed-paste mode: what it sends around
// pasted text, so a pasted line break is not an Enter.
var (
	pasteOn    = []byte("\x1b[?2004h")
	pasteOff   = []byte("\x1b[?2004l")
	pasteBegin = []byte("\x1b[200~")
	pasteEnd   = []byte("\x1b[201~")
)

// newlineBytes stand for a line break in what the editor reads: a rune it
// inserts like any other (Ctrl-J itself would end its read).
var newlineBytes = []byte(string(newline))

// input is the editor's stdin: the terminal's bytes, read by one goroutine
// for the life of the chat, with Ctrl-J, Alt-Enter (ESC CR) and the line
// breaks of a bracketed paste turned into newline, which the editor keeps;
// and bytes the chat puts in itself (inject), which end a question another
// channel answered.
type input struct {
	from chan chunk
	// editing is set while the editor reads, the terminal raw; otherwise
	// it is cooked, and a line typed ahead during a turn ends in "\n",
	// which is Enter then, not Ctrl-J.
	editing atomic.Bool
	mu      sync.Mutex
	queued  []byte // read or injected, not yet handed to the editor
	more    chan struct{}
	// What a chunk left undecided: an ESC, or part of a paste marker.
	held    []byte
	inPaste bool
}

// chunk is what one read of the terminal gave, and whether the editor
// was reading then.
type chunk struct {
	b       []byte
	editing bool
}

func newInput(r io.Reader) *input {
	in := &input{from: make(chan chunk), more: make(chan struct{}, 1)}
	go func() {
		eofs := 0
		for {
			buf := make([]byte, 4096)
			n, err := r.Read(buf)
			editing := in.editing.Load()
			if n > 0 {
				eofs = 0
				in.from <- chunk{buf[:n], editing}
			}
			// Ctrl-D typed ahead, the terminal cooked, is an end of file
			// the terminal reads on after: the editor's Ctrl-D (raw, it is
			// a byte). A terminal that keeps saying so is gone.
			if errors.Is(err, io.EOF) && eofs < 3 {
				eofs++
				in.from <- chunk{[]byte{4}, true}
				continue
			}
			if err != nil {
				close(in.from)
				return
			}
		}
	}()
	return in
}

// inject puts b before whatever the terminal sends next.
func (in *input) inject(b []byte) {
	in.mu.Lock()
	in.queued = append(b[:len(b):len(b)], in.queued...)
	in.mu.Unlock()
	select {
	case in.more <- struct{}{}:
	default:
	}
}

func (in *input) Read(p []byte) (int, error) {
	for {
		in.mu.Lock()
		if len(in.queued) > 0 {
			n := copy(p, in.queued)
			in.queued = in.queued[n:]
			in.mu.Unlock()
			return n, nil
		}
		in.mu.Unlock()
		select {
		case c, ok := <-in.from:
			if !ok {
				return 0, io.EOF
			}
			if !c.editing {
				c.b = bytes.ReplaceAll(c.b, []byte{'\n'}, []byte{'\r'}) // typed ahead: Enter
			}
			in.mu.Lock()
			in.queued = append(in.queued, in.translate(c.b)...)
			in.mu.Unlock()
		case <-in.more:
		}
	}
}

// Close is the editor's; the terminal stays open for the next one.
func (in *input) Close() error { return nil }

// translate turns one chunk of the terminal's bytes into the editor's,
// keeping what may continue in the next chunk.
func (in *input) translate(b []byte) []byte {
	b = append(in.held, b...)
	in.held = nil
	var out []byte
	for i := 0; i < len(b); i++ {
		rest := b[i:]
		switch {
		case rest[0] == 0x1b && (isPrefix(rest, pasteBegin) || isPrefix(rest, pasteEnd)):
			in.held = append([]byte(nil), rest...) // the marker ends in the next chunk
			return out
		case bytes.HasPrefix(rest, pasteBegin):
			in.inPaste = true
			i += len(pasteBegin) - 1
		case bytes.HasPrefix(rest, pasteEnd):
			in.inPaste = false
			i += len(pasteEnd) - 1
		case in.inPaste && rest[0] == '\r' && len(rest) > 1 && rest[1] == '\n':
			out = append(out, newlineBytes...)
			i++
		case in.inPaste && rest[0] == '\r', rest[0] == '\n': // a pasted line break, Ctrl-J
			out = append(out, newlineBytes...)
		case rest[0] == 0x1b && len(rest) == 1:
			in.held = []byte{0x1b} // Alt-Enter may be split
			return out
		case rest[0] == 0x1b && rest[1] == '\r':
			out = append(out, newlineBytes...)
			i++
		default:
			out = append(out, rest[0])
		}
	}
	return out
}

// isPrefix reports whether b is a proper beginning of marker.
func isPrefix(b, marker []byte) bool {
	return len(b) < len(marker) && bytes.HasPrefix(marker, b)
}
