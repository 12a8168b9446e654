package event

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"unicode/utf8"
)

// MaxLine is the longest event line a Decoder accepts.
const MaxLine = 8 << 20

// ErrLineTooLong is returned for a line longer than MaxLine; the line is skipped.
var ErrLineTooLong = errors.New("event line too long")

// Encoder writes events as JSON lines. It is safe for concurrent use.
type Encoder struct {
	mu sync.Mutex
	w  io.Writer
}

// NewEncoder returns an Encoder writing to w.
func NewEncoder(w io.Writer) *Encoder { return &Encoder{w: w} }

// Encode writes e as one line.
func (enc *Encoder) Encode(e Event) error {
	line, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("marshal event: %w", err)
	}
	line = append(line, '\n')
	enc.mu.Lock()
	defer enc.mu.Unlock()
	_, err = enc.w.Write(line)
	return err
}

// Decoder reads JSON-lines events. A malformed or oversized line is
// reported as a *LineError and reading may continue after it.
type Decoder struct {
	r    *bufio.Reader
	line int
}

// LineError describes a line that is not a valid event.
type LineError struct {
	Line int
	Err  error
	Text string // the start of the offending line
}

func (e *LineError) Error() string {
	return fmt.Sprintf("event line %d: %v", e.Line, e.Err)
}

func (e *LineError) Unwrap() error { return e.Err }

// NewDecoder returns a Decoder reading from r.
func NewDecoder(r io.Reader) *Decoder {
	return &Decoder{r: bufio.NewReaderSize(r, 64<<10)}
}

// Decode returns the next event, io.EOF at the end, a *LineError for a bad
// line (call Decode again to go on), or another error from the reader.
func (d *Decoder) Decode() (Event, error) {
	for {
		line, tooLong, err := d.readLine()
		if err != nil {
			return Event{}, err
		}
		d.line++
		if tooLong {
			return Event{}, &LineError{Line: d.line, Err: ErrLineTooLong, Text: preview(line)}
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var e Event
		if err := json.Unmarshal(line, &e); err != nil {
			return Event{}, &LineError{Line: d.line, Err: err, Text: preview(line)}
		}
		if e.Type == "" {
			return Event{}, &LineError{Line: d.line, Err: errors.New("missing type"), Text: preview(line)}
		}
		return e, nil
	}
}

// readLine reads one line, keeping at most MaxLine bytes of it. It returns
// io.EOF only when no bytes were read.
func (d *Decoder) readLine() ([]byte, bool, error) {
	var buf []byte
	tooLong := false
	for {
		chunk, err := d.r.ReadSlice('\n')
		n := len(chunk)
		if err == nil {
			n-- // the newline ends the line but is not part of it
		}
		if len(buf)+n > MaxLine {
			tooLong = true
			if len(buf) < 256 {
				buf = append(buf, chunk[:min(len(chunk), 256)]...)
			}
		} else {
			buf = append(buf, chunk...)
		}
		switch {
		case err == nil:
			return buf, tooLong, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if len(buf) == 0 {
				return nil, false, io.EOF
			}
			return buf, tooLong, nil
		default:
			return nil, false, err
		}
	}
}

func preview(line []byte) string {
	n := 120
	if len(line) <= n {
		return string(line)
	}
	for n > 0 && !utf8.RuneStart(line[n]) {
		n-- // never cut a character in half
	}
	return string(line[:n]) + "…"
}
