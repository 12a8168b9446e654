package cli

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/llm/llmtest"
	"agent/vision"
)

// An image given with --image and one read_file reads (a JPEG named
// .data: known by its bytes) reach a vision model as image parts: the
// first with the prompt, the second in a user message after the tool
// result, which names it. Killed while the model answers, the run resumes
// with the same request, images and all; the cassette it recorded has no
// image bytes, yet replays the run.
func TestImagesReachAVisionModelAcrossKillAndReplay(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("read_file", `{"path":"chart.data"}`)}},
		llmtest.Turn{Text: "I am looking", Hang: true},
		llmtest.Turn{Text: "A screen and a chart."},
	)
	screenPath := filepath.Join(filepath.Dir(e.Workspace), "screen.png")
	screen := e2etest.WriteImage(t, screenPath, "png", 64, 48)
	chart := e2etest.WriteImage(t, filepath.Join(e.Workspace, "chart.data"), "jpeg", 40, 30)
	cassette := filepath.Join(filepath.Dir(e.Workspace), "images.cassette.jsonl")

	b := e.Start("run", "--json", "--model", "gpt-4o", "--record", cassette, "--image", screenPath, "what do you see?")
	runID := b.WaitEvent(t, event.RunStarted).RunID
	e2etest.WaitFor(t, "the second model call", func() bool { return e.Srv.RequestCount() == 2 })
	b.Kill9(t)

	res := e.Run("resume", runID, "--json")
	if res.Code != 0 {
		t.Fatalf("resume exit %d: %s", res.Code, res.Stderr)
	}
	reqs := e.Srv.Requests()
	if len(reqs) != 3 {
		t.Fatalf("model got %d requests, want 3", len(reqs))
	}
	first := reqs[0].Messages()
	if got := first[1]; got.Role != "user" || !strings.HasPrefix(got.Content, "what do you see?screen.png: PNG image, 64×48, ") || !slices.Equal(got.Images, []string{screen}) {
		t.Errorf("the prompt reached the model as %+v; want its text, the image's line and the image", trimmed(got))
	}
	if got := reqs[1].Images(); !slices.Equal(got, []string{screen, chart}) {
		t.Errorf("the second request has %d images, want the prompt's and read_file's: %.200q", len(got), got)
	}
	msgs := reqs[1].Messages()
	tool, after := msgs[len(msgs)-2], msgs[len(msgs)-1]
	if tool.Role != "tool" || !strings.HasPrefix(tool.Content, "chart.data: JPEG image, 40×30, ") || !strings.HasSuffix(tool.Content, "(shown in the next message)") {
		t.Errorf("read_file's result = %+v; want a line naming the image", trimmed(tool))
	}
	if after.Role != "user" || !slices.Equal(after.Images, []string{chart}) {
		t.Errorf("after the tool result comes %+v; want a user message with the image", trimmed(after))
	}
	if !e2etest.EqualJSON(t, reqs[1].Messages(), reqs[2].Messages()) {
		t.Errorf("the resumed request differs from the one the kill cut off")
	}

	// runs show names the images each message gave, without their bytes.
	show := e.Run("runs", "show", runID)
	for _, want := range []string{"  user: what do you see?\n    image screen.png: PNG image, 64×48, ", "✓ read_file \n    image chart.data: JPEG image, 40×30, "} {
		if !strings.Contains(show.Stdout, want) {
			t.Errorf("runs show lacks %q:\n%s", want, show.Stdout)
		}
	}
	if js := e.Run("runs", "show", runID, "--json"); !strings.Contains(js.Stdout, `"media_type":"image/jpeg"`) || strings.Contains(js.Stdout, "base64") || len(js.Stdout) > 64<<10 {
		t.Errorf("runs show --json: %.500s", js.Stdout)
	}

	data, err := os.ReadFile(cassette)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "base64") || len(data) > 64<<10 {
		t.Errorf("the cassette holds the images' bytes (%d bytes)", len(data))
	}
	replay := e.Run("run", "--json", "--model", "gpt-4o", "--replay", cassette, "--image", screenPath, "what do you see?")
	if replay.Code != 0 {
		t.Fatalf("replay exit %d: %s", replay.Code, replay.Stderr)
	}
	if fin := e2etest.LastFinished(t, e2etest.DecodeEvents(t, replay.Stdout)); fin.Result != "A screen and a chart." {
		t.Errorf("replayed result = %q", fin.Result)
	}
	if n := e.Srv.RequestCount(); n != 3 {
		t.Errorf("the replay asked the model: %d requests", n)
	}
}

// trimmed is a message without its images' bytes, for an error message.
func trimmed(m llmtest.Message) llmtest.Message {
	m.Images = slices.Clone(m.Images)
	for i, u := range m.Images {
		m.Images[i] = u[:min(len(u), 40)] + "…"
	}
	return m
}

// A model that does not see images (one not known to, or a known one with
// vision = false in config.toml) reads one line per image, the prompt's
// and read_file's, and is sent none of their bytes.
func TestImagesForAModelWithoutVision(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, model, config string }{
		{"unknown model", "test-model", ""},
		{"vision = false", "gpt-4o", "vision = false\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := e2etest.New(t,
				llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("read_file", `{"path":"chart.gif"}`)}},
				llmtest.Turn{Text: "I cannot see them."},
			)
			if tc.config != "" {
				e.WriteConfig(tc.config)
			}
			screen := e2etest.WriteImage(t, filepath.Join(e.Workspace, "screen.png"), "png", 64, 48)
			chart := e2etest.WriteImage(t, filepath.Join(e.Workspace, "chart.gif"), "gif", 20, 10)
			res := e.Run("run", "--json", "--model", tc.model, "--image", "screen.png", "describe them")
			if res.Code != 0 {
				t.Fatalf("exit %d: %s", res.Code, res.Stderr)
			}
			last := e.Srv.Requests()[1]
			msgs := last.Messages()
			user, tool := msgs[1], msgs[3]
			if want := "describe them\nscreen.png: PNG image, 64×48, " + size(t, e, "screen.png") + "; this model cannot see images"; user.Content != want {
				t.Errorf("the prompt reached the model as %q, want %q", user.Content, want)
			}
			if want := "chart.gif: GIF image, 20×10, " + size(t, e, "chart.gif") + "; this model cannot see images"; tool.Content != want {
				t.Errorf("read_file's result reached the model as %q, want %q", tool.Content, want)
			}
			body := string(last.Body)
			for _, url := range []string{screen, chart} {
				if b64 := url[strings.Index(url, ",")+1:]; strings.Contains(body, b64[:40]) || strings.Contains(body, "image_url") {
					t.Errorf("a model without vision was sent an image's bytes")
				}
			}
		})
	}
}

// size is how the model is told the size of the workspace's file name.
func size(t *testing.T, e *e2etest.Env, name string) string {
	t.Helper()
	fi, err := os.Stat(filepath.Join(e.Workspace, name))
	if err != nil {
		t.Fatal(err)
	}
	return vision.Size(fi.Size())
}

// An --image that is missing, over 20 MB or no image is a usage error
// (exit 2), in one line naming the file: nothing is recorded and no model
// is asked, for run as for chat.
func TestImageFlagRefusesWhatIsNoImage(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t)
	huge := filepath.Join(e.Workspace, "huge.png")
	if err := os.WriteFile(huge, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, 21<<20); err != nil { // sparse: nothing is read
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.Workspace, "notes.png"), []byte("a note, not a picture\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ file, want string }{
		{"gone.png", "--image: gone.png does not exist"},
		{"huge.png", "--image: huge.png is 21 MB, more than the 20 MB an image may be"},
		{"notes.png", "--image: notes.png: not a PNG, JPEG, GIF or WebP image"},
	} {
		for _, cmd := range []string{"run", "chat"} {
			res := e.Run(cmd, "--image", tc.file, "look")
			if cmd == "chat" {
				res = e.Run(cmd, "--image", tc.file)
			}
			if res.Code != 2 || !strings.Contains(res.Stderr, tc.want) || strings.Count(strings.TrimSpace(res.Stderr), "\n") != 0 {
				t.Errorf("%s --image %s: exit %d, stderr %q; want 2 and one line with %q", cmd, tc.file, res.Code, res.Stderr, tc.want)
			}
		}
	}
	if n := e.Srv.RequestCount(); n != 0 {
		t.Errorf("the model was asked %d times", n)
	}
	if list := e.Run("runs", "list", "--json"); strings.TrimSpace(list.Stdout) != "" && strings.TrimSpace(list.Stdout) != "[]" {
		t.Errorf("runs were recorded: %s", list.Stdout)
	}
}

// agent chat --image gives the image with the first message; the
// session's next message is a run of its own that sees the image once,
// in the session's earlier conversation, as the store kept it.
func TestChatImageGoesWithTheFirstMessage(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, llmtest.Turn{Text: "A screen."}, llmtest.Turn{Text: "Still a screen."})
	url := e2etest.WriteImage(t, filepath.Join(e.Workspace, "screen.png"), "png", 30, 20)
	cmd := e.Command("chat", "--json", "--model", "gpt-4o", "--image", "screen.png")
	cmd.Stdin = strings.NewReader("what is this?\nand now?\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("agent chat: %v\n%s", err, out)
	}
	reqs := e.Srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	if got := reqs[0].Images(); !slices.Equal(got, []string{url}) {
		t.Errorf("the first message's request has %d images, want the one given", len(got))
	}
	second := reqs[1].Messages()
	if got := reqs[1].Images(); !slices.Equal(got, []string{url}) || len(second[1].Images) != 1 || second[len(second)-1].Images != nil {
		t.Errorf("the second message's request has %d images; want the first message's, once, and none with the second", len(got))
	}
}

// resume --image gives the model the image before the run goes on, in a
// message of its own after the conversation so far; killed again, the run
// resumes without giving it twice.
func TestResumeWithAnImage(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{Text: "Thinking", Hang: true},
		llmtest.Turn{Text: "Looking", Hang: true},
		llmtest.Turn{Text: "A diagram."},
	)
	url := e2etest.WriteImage(t, filepath.Join(e.Workspace, "diagram.png"), "png", 16, 16)
	b := e.Start("run", "--json", "--model", "gpt-4o", "explain the design")
	runID := b.WaitEvent(t, event.RunStarted).RunID
	e2etest.WaitFor(t, "the first model call", func() bool { return e.Srv.RequestCount() == 1 })
	b.Kill9(t)

	b = e.Start("resume", runID, "--json", "--image", "diagram.png")
	e2etest.WaitFor(t, "the resumed model call", func() bool { return e.Srv.RequestCount() == 2 })
	b.Kill9(t)
	res := e.Run("resume", runID, "--json")
	if res.Code != 0 {
		t.Fatalf("resume exit %d: %s", res.Code, res.Stderr)
	}
	reqs := e.Srv.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	msgs := reqs[1].Messages()
	if last := msgs[len(msgs)-1]; last.Role != "user" || !slices.Equal(last.Images, []string{url}) || len(msgs) != 3 {
		t.Errorf("the resumed request ends with %+v (%d messages); want the image in a message of its own after the prompt", trimmed(last), len(msgs))
	}
	if !e2etest.EqualJSON(t, reqs[1].Messages(), reqs[2].Messages()) {
		t.Errorf("the second resume gave the model another request than the first")
	}
}

// TestChatTmuxImage: at a terminal, /image of a file that is not there is
// said and the chat goes on; /image of one names it and gives it with the
// next message only.
func TestChatTmuxImage(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, llmtest.Turn{Text: "A gradient."}, llmtest.Turn{Text: "Still a gradient."})
	url := e2etest.WriteImage(t, filepath.Join(e.Workspace, "screen.png"), "png", 30, 20)
	capture, keys := tmuxSession(t, chatShell(e, "--model", "gpt-4o"))
	waitScreen(t, "the prompt", capture, func(s string) bool { return strings.Contains(s, "gpt-4o ›") })
	keys("/image nope.png", "Enter")
	waitScreen(t, "the missing image", capture, func(s string) bool { return strings.Contains(s, "/image: nope.png does not exist") })
	waitScreen(t, "the prompt again", capture, atPrompt)
	keys("/image screen.png", "Enter")
	waitScreen(t, "the image taken", capture, func(s string) bool {
		return strings.Contains(s, "screen.png: PNG image, 30×20, ") && strings.Contains(s, "goes with the next message")
	})
	waitScreen(t, "the prompt again", capture, atPrompt)
	keys("what is it?", "Enter")
	waitScreen(t, "the answer", capture, func(s string) bool { return strings.Contains(s, "A gradient.") })
	waitScreen(t, "the prompt again", capture, atPrompt)
	keys("and now?", "Enter")
	waitScreen(t, "the second answer", capture, func(s string) bool { return strings.Contains(s, "Still a gradient.") })
	reqs := e.Srv.Requests()
	if !slices.Equal(reqs[0].Images(), []string{url}) || !slices.Equal(reqs[1].Images(), []string{url}) || reqs[1].LastMessage().Images != nil {
		t.Errorf("the requests have %d and %d images; want the image with the first message only (seen again in the second's history)",
			len(reqs[0].Images()), len(reqs[1].Images()))
	}
	waitScreen(t, "the prompt again", capture, atPrompt)
	keys("C-d")
	waitScreen(t, "the chat to end", capture, func(s string) bool { return strings.Contains(s, "EXIT=0") })
	sameTerminal(t, e)
}
