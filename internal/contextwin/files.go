package contextwin

import (
	"fmt"
	"strings"

	"atrium/internal/llm"
	"atrium/internal/store"
)

// FileBlock is how an attached text file goes to the model, before the message's
// own text: a line naming the file, its type and size, then the text inside a
// backtick fence longer than any run of backticks in it, so the file cannot end its
// block early or pass for the user's words.
// The text of a PDF says so (only its text is stored).
func FileBlock(name, mime string, text string) string {
	fence := Fence(text)
	what := mime
	if mime == store.PDFText {
		what = "text read from a PDF"
	}
	return fmt.Sprintf("Attached file %q (%s, %d bytes):\n%s\n%s\n%s\n\n", name, what, len(text), fence, strings.TrimRight(text, "\n"), fence)
}

// Fence is a backtick fence longer than any run of backticks in text (at least 3).
func Fence(text string) string {
	longest, run := 0, 0
	for i := 0; i < len(text); i++ {
		if text[i] == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	return strings.Repeat("`", max(3, longest+1))
}

// ImageTokens estimates what an image of w×h pixels costs in the context. Providers
// count differently (Anthropic about w·h/750 after scaling the long side to 1568 px;
// OpenAI 85 + 170 per 512-px tile after fitting 2048 px and a 768-px short side); the
// estimate is the larger of the two, so the budget holds with either.
func ImageTokens(w, h int) int {
	if w <= 0 || h <= 0 {
		return 85
	}
	// Anthropic.
	aw, ah := float64(w), float64(h)
	if long := max(aw, ah); long > 1568 {
		aw, ah = aw*1568/long, ah*1568/long
	}
	anthropic := int(aw*ah/750) + 1
	// OpenAI, high detail.
	ow, oh := float64(w), float64(h)
	if long := max(ow, oh); long > 2048 {
		ow, oh = ow*2048/long, oh*2048/long
	}
	if short := min(ow, oh); short > 768 {
		ow, oh = ow*768/short, oh*768/short
	}
	tiles := ((int(ow) + 511) / 512) * ((int(oh) + 511) / 512)
	openai := 85 + 170*tiles
	return max(anthropic, openai)
}

// withAttachments is the model's view of user message m: its text files as blocks
// before its text, and its images as image parts, or, when the model takes no images
// (noImages), a line saying each image was left out. It returns the message and the
// tokens the attachments add to its text (their stored counts, the note's when left
// out) and as images.
func (a *assembler) withAttachments(m *store.Message, noImages bool) (msg llm.Message, extra, images int) {
	msg = llm.Message{Role: m.Role, Content: m.Content}
	if len(m.Attachments) == 0 {
		return msg, 0, 0
	}
	var b strings.Builder
	for _, f := range m.Attachments {
		switch {
		case f.Kind == store.AttachText:
			b.WriteString(FileBlock(f.Name, f.MIME, string(f.Data)))
			extra += f.Tokens
		case noImages:
			note := fmt.Sprintf("[Attached image %q not sent: this model does not take images.]\n\n", f.Name)
			b.WriteString(note)
			extra += a.tok.Count(note)
		default:
			msg.Images = append(msg.Images, llm.Image{MediaType: f.MIME, Data: f.Data})
			images += f.Tokens
		}
	}
	b.WriteString(m.Content)
	msg.Content = b.String()
	return msg, extra, images
}
