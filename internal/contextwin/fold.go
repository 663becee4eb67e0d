package contextwin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"atrium/internal/llm"
	"atrium/internal/store"
)

// Summarizer asks a model for the reply to msgs; the agent passes a function
// that calls the session's provider.
type Summarizer func(ctx context.Context, msgs []llm.Message) (string, error)

// Fold returns the rolling summary old updated with turns (Report.Unsummarised),
// within b.Summary tokens by count: when the model's answer is longer it is
// asked once more, firmly, and a still-too-long answer is cut at the last
// sentence end within the budget. Long messages are shortened in the prompt as
// in the context. No turns returns old unchanged.
//
// A failing summarizer or an empty answer is an error (wrapped with
// "contextwin: fold: "); the caller records it and keeps the watermark, so the
// turns stay in the context verbatim and are folded on a later turn. A failure
// of the second, firmer request is not: the first answer is cut instead,
// unless ctx is done.
func Fold(ctx context.Context, sum Summarizer, old string, turns []store.Message, b Budgets, tok Tokenizer) (string, error) {
	if len(turns) == 0 {
		return old, nil
	}
	b = b.withDefaults()
	budget := b.Summary
	msgs := []llm.Message{
		{Role: llm.RoleSystem, Content: foldInstructions(budget)},
		{Role: llm.RoleUser, Content: foldPrompt(old, turns, b, tok)},
	}
	answer, err := sum(ctx, msgs)
	if err != nil {
		return "", fmt.Errorf("contextwin: fold: %w", err)
	}
	answer = strings.TrimSpace(answer)
	if answer == "" {
		return "", errors.New("contextwin: fold: the model returned an empty summary")
	}
	n := tok.Count(answer)
	if n <= budget {
		return answer, nil
	}
	msgs = append(msgs,
		llm.Message{Role: llm.RoleAssistant, Content: answer},
		llm.Message{Role: llm.RoleUser, Content: fmt.Sprintf(
			"That summary is %d tokens long; the hard limit is %d tokens. Rewrite it in at most %d tokens: "+
				"keep decisions, facts, open questions and the user's preferences, drop everything else. "+
				"Reply with the summary only.", n, budget, budget*4/5)},
	)
	second, err := sum(ctx, msgs)
	if err != nil && ctx.Err() != nil {
		return "", fmt.Errorf("contextwin: fold: %w", err)
	}
	if second = strings.TrimSpace(second); err == nil && second != "" {
		if m := tok.Count(second); m <= budget {
			return second, nil
		} else if m < n {
			answer, n = second, m
		}
	}
	return cutAtSentence(tok, answer, n, budget), nil
}

// FoldInputMax is how many tokens of turns one fold reads: what the window leaves
// after the summary going in and coming out (twice, for the firmer retry) and the
// instructions, within 500–8,000, so that a backlog never makes one huge prompt.
func FoldInputMax(b Budgets) int {
	b = b.withDefaults()
	return min(8000, max(500, b.Window-b.ReplyReserve-3*b.Summary-300))
}

// FoldBatch returns the oldest whole turns of turns (at least one) whose tokens stay
// within FoldInputMax; fold those and advance the watermark to the last one's seq,
// the rest are folded next.
func FoldBatch(turns []store.Message, b Budgets, tok Tokenizer) []store.Message {
	b = b.withDefaults()
	limit, used, end := FoldInputMax(b), 0, 0 // turns[:end] are whole turns within limit
	for i := range turns {
		m := &turns[i]
		if i > 0 && m.Role == store.RoleUser {
			if used > limit {
				if end > 0 {
					return turns[:end]
				}
				return turns[:i] // the first turn alone is over: it goes alone, cut
			}
			end = i
		}
		n := m.Tokens
		if n <= 0 {
			n = tok.Count(m.Content)
		}
		used += min(n, b.ToolResultHead+b.ToolResultTail+20) // long messages are cut in the prompt
	}
	if used > limit && end > 0 {
		return turns[:end]
	}
	return turns
}

func foldInstructions(budget int) string {
	return fmt.Sprintf(`You maintain the rolling summary of a conversation between a user and an AI assistant.
You get the current summary and the turns that happened after it. Reply with the updated summary only, no preamble.
Keep: decisions made, facts established (names, numbers, file names, results of tool calls that matter later), open questions and unfinished tasks, and the user's preferences and constraints.
Drop: greetings, small talk, repetition, and details that no longer matter.
Write short factual sentences or bullet points in the language of the conversation. The summary must be at most %d tokens (about %d words).`,
		budget, budget*3/4)
}

func foldPrompt(old string, turns []store.Message, b Budgets, tok Tokenizer) string {
	var sb strings.Builder
	sb.WriteString("Current summary:\n")
	if old == "" {
		sb.WriteString("(none yet)")
	} else {
		sb.WriteString(old)
	}
	sb.WriteString("\n\nNew turns to fold in:\n")
	names := map[string]string{} // store.ToolCallKey -> tool name (provider ids repeat)
	for i := range turns {
		m := &turns[i]
		calls, _ := ParseToolCalls(m.ToolCalls)
		if m.Content == "" && len(calls) == 0 {
			continue
		}
		content := m.Content
		if n := m.Tokens; n > b.ToolResultMax || (n <= 0 && len(content) > 4*b.ToolResultMax) {
			if n <= 0 {
				n = tok.Count(content)
			}
			if n > b.ToolResultMax && n > b.ToolResultHead+b.ToolResultTail {
				content, _ = cutText(tok, content, n, b.ToolResultHead, b.ToolResultTail)
			}
		}
		switch m.Role {
		case store.RoleUser:
			sb.WriteString("\nUser: ")
		case store.RoleAssistant:
			sb.WriteString("\nAssistant: ")
		case store.RoleTool:
			name := names[m.CallKey]
			if name == "" {
				name = "a tool"
			}
			fmt.Fprintf(&sb, "\nResult of %s: ", name)
		default:
			sb.WriteString("\nNote: ")
		}
		sb.WriteString(content)
		for k, c := range calls {
			names[store.ToolCallKey(m.ID, k)] = c.Name
			args := c.Arguments // cut like a long result: they can be as large
			if n := tok.Count(args); n > b.ToolResultMax && n > b.ToolResultHead+b.ToolResultTail {
				args, _ = cutText(tok, args, n, b.ToolResultHead, b.ToolResultTail)
			}
			fmt.Fprintf(&sb, "\n(Assistant called %s with %s)", c.Name, args)
		}
	}
	return sb.String()
}

// cutAtSentence returns the longest prefix of text (n tokens) within budget
// tokens that ends a sentence, or at a word when no sentence ends early enough.
func cutAtSentence(tok Tokenizer, text string, n, budget int) string {
	for limit := budget; n > budget && limit > 0; {
		h, _ := cutOffsets(tok, text, limit, 0)
		prefix := text[:h]
		end := lastSentenceEnd(prefix)
		if end < len(prefix)/3 { // no sentence end worth keeping: cut at a word
			end = strings.LastIndexAny(prefix, " \n\t")
			if end <= 0 {
				end = len(prefix)
			}
		}
		text = strings.TrimSpace(prefix[:end])
		n = tok.Count(text)
		limit -= n - budget // re-tokenising the prefix can differ: tighten and retry
	}
	return text
}

// lastSentenceEnd returns the index just past the last sentence end in s
// (., !, ? or their CJK forms followed by a space, line end or the end; or a
// line break), or -1.
func lastSentenceEnd(s string) int {
	for i := len(s); i > 0; {
		r, size := utf8.DecodeLastRuneInString(s[:i])
		i -= size
		switch r {
		case '\n', '。', '！', '？':
			return i + size
		case '.', '!', '?':
			if j := i + size; j == len(s) || s[j] == ' ' || s[j] == '\n' {
				return j
			}
		}
	}
	return -1
}
