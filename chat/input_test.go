package chat

import (
	"io"
	"strings"
	"testing"
)

// What the editor reads of what a terminal sends: Ctrl-J, Alt-Enter and a
// paste's line breaks are line breaks within the message, Enter sends it,
// and a paste marker split between two reads is still taken out.
func TestInputTranslates(t *testing.T) {
	t.Parallel()
	nl := string(newline)
	for _, tc := range []struct {
		name   string
		chunks []string
		want   string
	}{
		{"Enter sends", []string{"hi\r"}, "hi\r"},
		{"Ctrl-J adds a line", []string{"a\nb\r"}, "a" + nl + "b\r"},
		{"Alt-Enter adds a line", []string{"a\x1b\rb\r"}, "a" + nl + "b\r"},
		{"Alt-Enter split", []string{"a\x1b", "\rb"}, "a" + nl + "b"},
		{"a paste stays one message", []string{"\x1b[200~one\r\ntwo\rthree\x1b[201~\r"}, "one" + nl + "two" + nl + "three\r"},
		{"markers split", []string{"\x1b[20", "0~x\ry\x1b[2", "01~\r"}, "x" + nl + "y\r"},
		{"other escapes pass", []string{"\x1b[A\x1bb"}, "\x1b[A\x1bb"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := &input{}
			var got strings.Builder
			for _, c := range tc.chunks {
				got.Write(in.translate([]byte(c)))
			}
			if got.String() != tc.want {
				t.Errorf("got %q, want %q", got.String(), tc.want)
			}
		})
	}
}

// A read waiting for the terminal returns what the chat injects (a
// question another channel answered), then the terminal's bytes as they come.
func TestInputInject(t *testing.T) {
	t.Parallel()
	r, w := io.Pipe()
	in := newInput(r)
	got := make(chan string)
	go func() {
		buf := make([]byte, 16)
		n, _ := in.Read(buf)
		got <- string(buf[:n])
	}()
	in.inject([]byte{3})
	if s := <-got; s != "\x03" {
		t.Errorf("read %q, want the injected Ctrl-C", s)
	}
	go func() { _, _ = w.Write([]byte("typed")) }()
	buf := make([]byte, 16)
	n, err := in.Read(buf)
	if err != nil || string(buf[:n]) != "typed" {
		t.Errorf("read %q, %v; want what was typed", buf[:n], err)
	}
	// An end of file is Ctrl-D typed while the terminal was cooked; one
	// that keeps coming is a terminal gone.
	w.Close()
	for i := 0; i < 3; i++ {
		if n, err := in.Read(buf); err != nil || string(buf[:n]) != "\x04" {
			t.Fatalf("end of file %d: %q, %v; want Ctrl-D", i, buf[:n], err)
		}
	}
	if _, err := in.Read(buf); err != io.EOF {
		t.Errorf("after the terminal closed: %v, want EOF", err)
	}
}

// A line typed ahead while a turn runs, the terminal cooked, ends in "\n":
// Enter, sent at the next prompt; at the editor "\n" is Ctrl-J.
func TestInputTypedAhead(t *testing.T) {
	t.Parallel()
	r, w := io.Pipe()
	in := newInput(r)
	go func() { _, _ = w.Write([]byte("ahead\n")) }()
	buf := make([]byte, 16)
	if n, _ := in.Read(buf); string(buf[:n]) != "ahead\r" {
		t.Errorf("typed ahead: %q, want the line and Enter", buf[:n])
	}
	in.editing.Store(true)
	go func() { _, _ = w.Write([]byte("a\nb")) }()
	if n, _ := in.Read(buf); string(buf[:n]) != "a"+string(newline)+"b" {
		t.Errorf("at the editor: %q, want a line break within the message", buf[:n])
	}
}
