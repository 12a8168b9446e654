package runner

import (
	"context"
	"fmt"
	"strings"

	"agent/event"
	"agent/llm"
	"agent/prompts"
)

// Compaction (README.md#context-and-spend): before a request that would not fit the
// model's context window, and after a provider refused one as too long,
// the middle of the conversation is replaced by a summary the model writes
// (with no tools offered). The system prompt, the iteration's first user
// message and the most recent turns stay as they are; so does any tool
// call still waiting for its result, since compaction happens only
// between turns. A refusal that states the window (most providers' do)
// sets it for the rest of the loop, so at most one request is refused. It
// is recorded as context.compacted before the conversation changes, so a
// resume, a fork or a replay rebuilds the same one.

// maxCompactions bounds compactions for one request refused as too long:
// each keeps less of the recent turns.
const maxCompactions = 2

// estimateTokens guesses the tokens of a request: about 4 bytes each,
// corrected by what the provider reported for the previous one.
func (l *loop) estimateTokens(msgs []llm.Message) int {
	return int(float64(rawTokens(msgs)+l.toolTokens()) * l.tokenRatio())
}

// imageTokens is what an image is taken to cost: about what the
// providers charge for one of a megapixel (OpenAI 765 tokens at high
// detail, Anthropic width×height/750).
const imageTokens = 1000

// rawTokens is the uncorrected estimate of messages.
func rawTokens(msgs []llm.Message) int {
	n := 0
	for _, m := range msgs {
		n += len(m.Content) + 16 + len(m.Images)*imageTokens*4
		for _, c := range m.ToolCalls {
			n += len(c.Name) + len(c.Arguments) + 16
		}
	}
	return n / 4
}

func (l *loop) toolTokens() int {
	n := 0
	for _, d := range l.cfg.Tools.Definitions() {
		n += len(d.Name) + len(d.Description) + len(d.Parameters)
	}
	return n / 4
}

func (l *loop) tokenRatio() float64 {
	if l.ratio <= 0 {
		return 1
	}
	return l.ratio
}

// calibrate learns how the provider counts from a request it answered.
func (l *loop) calibrate(msgs []llm.Message, reported int) {
	if est := rawTokens(msgs) + l.toolTokens(); reported > 0 && est > 0 {
		l.ratio = float64(reported) / float64(est)
	}
}

// keepTokens is how much of the recent conversation a compaction keeps:
// a quarter of the window, less at each further level.
func (l *loop) keepTokens(level int) int {
	base := l.cfg.ContextWindow
	if base <= 0 {
		base = l.estimateTokens(l.messages())
	}
	return (base / 4) >> level
}

// learnWindow takes the context window a provider stated when it refused
// a request as too long: from then on the conversation is compacted
// before a request would pass it, rather than after each refusal. A
// smaller window configured by the user is kept.
func (l *loop) learnWindow(ctx context.Context, window int) error {
	if window <= 0 || l.cfg.ContextWindow > 0 && l.cfg.ContextWindow <= window {
		return nil
	}
	l.cfg.ContextWindow = window
	return l.emit(ctx, event.New(event.Warning, event.WarningData{Message: fmt.Sprintf(
		"the model's context window is %d tokens, as the provider says: the conversation is compacted before a request would pass it (set --context-window or context_window to skip the refusal)", window)}))
}

// reserve is the room a request leaves for the reply.
func reserve(window int) int {
	return max(window/8, 256)
}

// wouldOverflow reports whether the next request would pass the window.
func (l *loop) wouldOverflow() bool {
	w := l.cfg.ContextWindow
	return l.cfg.Compact && w > 0 && l.estimateTokens(l.messages()) > w-reserve(w)
}

// compact replaces the middle of the conversation with a summary, keeping
// recent turns worth about keep tokens. It reports false when there is
// nothing to replace.
func (l *loop) compact(ctx context.Context, trigger string, keep int) (bool, error) {
	hist := l.state.History
	if len(hist) == 0 {
		return false, nil
	}
	cut := l.cutFor(keep)
	replaced := append(append([]llm.Message(nil), l.state.Prior...), hist[1:cut]...)
	if len(replaced) < 2 {
		return false, nil
	}
	if l.spent() { // the summary is a request too
		return false, errBudget
	}
	if err := l.preCompact(ctx, trigger); err != nil {
		return false, err
	}
	before := l.estimateTokens(l.messages())
	summary, usage, err := l.summarise(ctx, replaced, len(l.state.Prior) > 0)
	if err != nil {
		return false, err
	}
	next := make([]llm.Message, 0, 2+len(hist)-cut)
	next = append(next, hist[0], llm.Message{Role: llm.RoleUser, Content: prompts.SummaryHeading + "\n" + summary})
	next = append(next, hist[cut:]...)
	after := l.estimateTokens(append([]llm.Message{{Role: llm.RoleSystem, Content: l.system}}, next...))
	// Recorded first: the conversation changes only once it is on record.
	if err := l.emit(ctx, event.New(event.ContextCompacted, event.ContextCompactedData{
		Iteration: l.state.Iteration, From: 1, Count: cut - 1, Prior: len(l.state.Prior) > 0,
		TokensBefore: before, TokensAfter: after, Summary: summary, Trigger: trigger,
		Usage: event.Usage{PromptTokens: usage.PromptTokens, CompletionTokens: usage.CompletionTokens},
	})); err != nil {
		return false, err
	}
	l.state.Usage.PromptTokens += usage.PromptTokens
	l.state.Usage.CompletionTokens += usage.CompletionTokens
	l.state.History, l.state.Prior = next, nil
	return true, nil
}

// cutFor is the index of the first history message kept: the most recent
// turns worth about keep tokens, starting at a user or assistant message
// (a tool result never loses the call it answers), and at least the last
// turn.
func (l *loop) cutFor(keep int) int {
	hist := l.state.History
	cut, tokens := len(hist), 0
	for cut > 1 {
		t := rawTokens(hist[cut-1 : cut])
		if tokens+t > keep {
			break
		}
		tokens += t
		cut--
	}
	for cut < len(hist) && hist[cut].Role == llm.RoleTool {
		cut++
	}
	// Keep the last assistant message and its results whatever their size.
	for i := len(hist) - 1; i >= 1; i-- {
		if hist[i].Role == llm.RoleAssistant {
			cut = min(cut, i)
			break
		}
	}
	return max(cut, 1)
}

// summaryInputShare is the part of the window a summary request may fill
// with the transcript.
const summaryInputShare = 0.6

// summarise asks the model, with no tools, for a summary of msgs.
func (l *loop) summarise(ctx context.Context, msgs []llm.Message, prior bool) (string, llm.Usage, error) {
	// Bytes of transcript: a share of the window, or when it is unknown
	// (the provider just refused the conversation) half of what it refused.
	limit := min(400_000, rawTokens(l.messages())*4/2)
	if w := l.cfg.ContextWindow; w > 0 {
		limit = int(float64(w) * summaryInputShare * 4)
	}
	text, err := prompts.Render("compaction", prompts.Compaction{Transcript: transcript(msgs, limit), Prior: prior})
	if err != nil {
		return "", llm.Usage{}, err
	}
	resp, err := l.cfg.Model.Stream(ctx, llm.Request{
		Model:    l.cfg.ModelName,
		Messages: []llm.Message{{Role: llm.RoleUser, Content: text}},
	}, func(string) {})
	if err != nil {
		return "", llm.Usage{}, fmt.Errorf("compact the conversation: %w", err)
	}
	summary := strings.TrimSpace(resp.Message.Content)
	if summary == "" {
		summary = "(the model returned an empty summary)"
	}
	return summary, resp.Usage, nil
}

// transcript renders messages as text for the summary request, each tool
// result cut to a few thousand bytes and the whole to limit bytes (its
// middle goes first).
func transcript(msgs []llm.Message, limit int) string {
	const perResult = 3000
	var b strings.Builder
	for _, m := range msgs {
		switch m.Role {
		case llm.RoleTool:
			b.WriteString("TOOL RESULT: ")
			b.WriteString(middleOut(m.Content, perResult))
			for _, img := range m.Images {
				fmt.Fprintf(&b, "\n[image %s]", img.About)
			}
		default:
			b.WriteString(strings.ToUpper(string(m.Role)))
			b.WriteString(": ")
			b.WriteString(m.Content)
			for _, img := range m.Images {
				fmt.Fprintf(&b, "\n[image %s]", img.About)
			}
			for _, c := range m.ToolCalls {
				fmt.Fprintf(&b, "\n[called %s %s]", c.Name, middleOut(c.Arguments, perResult))
			}
		}
		b.WriteString("\n\n")
	}
	return middleOut(b.String(), limit)
}

// middleOut keeps the head and tail of s within n bytes.
func middleOut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	half := n / 2
	return strings.ToValidUTF8(s[:half], "") + "\n[… " + fmt.Sprint(len(s)-n) + " bytes left out …]\n" + strings.ToValidUTF8(s[len(s)-half:], "")
}
