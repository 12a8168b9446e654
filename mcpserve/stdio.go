package mcpserve

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxLine bounds one message from the client, as the SDK's own default.
const maxLine = sdk.DefaultMaxLineLength

// JSON-RPC 2.0 error codes for a line that is no request.
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
)

// stdioTransport is the server's end of stdio. The SDK reads the client's
// lines with one JSON decoder and ends the connection at the first line
// that is not JSON-RPC, and with it the server. A JSON-RPC server answers
// such a line with an error (-32700 Parse error, -32600 Invalid Request)
// and reads the next: so lines are checked here and only messages reach
// the SDK. Both write to out through one lock, a message at a time.
func stdioTransport(in io.Reader, out io.Writer, log *slog.Logger) sdk.Transport {
	pr, pw := io.Pipe()
	w := &lineWriter{w: out}
	go filterLines(in, pw, w, log)
	return &sdk.IOTransport{Reader: pr, Writer: w}
}

// lineWriter writes whole messages to the client, one at a time.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Close leaves stdout open, as the SDK's StdioTransport does.
func (l *lineWriter) Close() error { return nil }

// filterLines copies the messages among in's lines to pw and answers the
// other lines on w, until in ends.
func filterLines(in io.Reader, pw *io.PipeWriter, w *lineWriter, log *slog.Logger) {
	r := bufio.NewReaderSize(in, 64<<10)
	for {
		line, tooLong, err := readLine(r)
		line = bytes.TrimSpace(line)
		switch {
		case tooLong:
			answer(w, log, nil, codeParseError, "Parse error: a message over 16 MiB")
		case len(line) == 0:
		case !json.Valid(line):
			answer(w, log, nil, codeParseError, "Parse error: the line is not JSON")
		case !isMessage(line):
			answer(w, log, requestID(line), codeInvalidRequest, "Invalid Request: not a JSON-RPC 2.0 message")
		default:
			if _, werr := pw.Write(append(line, '\n')); werr != nil {
				return // the SDK closed the connection
			}
		}
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			pw.CloseWithError(err) // io.EOF for the SDK: the client hung up
			return
		}
	}
}

// readLine reads up to and including the next newline; a line over
// maxLine is read to its end and dropped.
func readLine(r *bufio.Reader) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := r.ReadSlice('\n')
		if !tooLong && len(line)+len(chunk) <= maxLine {
			line = append(line, chunk...)
		} else {
			line, tooLong = nil, true
		}
		if err != bufio.ErrBufferFull {
			return line, tooLong, err
		}
	}
}

// isMessage reports whether line is a JSON-RPC message, or a non-empty
// batch of them, as the SDK reads them.
func isMessage(line []byte) bool {
	var batch []json.RawMessage
	if json.Unmarshal(line, &batch) == nil {
		for _, m := range batch {
			if _, err := jsonrpc.DecodeMessage(m); err != nil {
				return false
			}
		}
		return len(batch) > 0
	}
	_, err := jsonrpc.DecodeMessage(line)
	return err == nil
}

// requestID is the id of a line that is not a valid request, when it has
// a usable one: the error is then the answer to it. Otherwise null.
func requestID(line []byte) json.RawMessage {
	var m struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(line, &m) != nil {
		return nil
	}
	var id any
	_ = json.Unmarshal(m.ID, &id)
	switch id.(type) {
	case string, float64:
		return m.ID
	}
	return nil
}

// rpcError is the error of a JSON-RPC response.
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// answer writes a JSON-RPC error response for a line that was no request.
func answer(w *lineWriter, log *slog.Logger, id json.RawMessage, code int, msg string) {
	if id == nil {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   rpcError        `json:"error"`
	}{JSONRPC: "2.0", ID: id, Error: rpcError{Code: code, Message: msg}})
	log.Warn("a line from the client is no request; answered with an error", "code", code, "error", msg)
	_, _ = w.Write(append(b, '\n'))
}
