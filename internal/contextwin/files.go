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

// Limits on the images of one request. Anthropic refuses a request over 32 MB, and
// one with more than 20 images unless each is at most 2000 px a side; base64 makes an
// image a third larger, so 18 MiB of images is 24 MiB on the wire and leaves room for
// the text. The newest images are sent; older ones become a note (leftImages).
const (
	MaxRequestImages     = 20
	MaxRequestImageBytes = 18 << 20
)

// leftImages picks the images of msgs (user messages after summarySeq) that do not
// fit the request's image limits: walking from the newest message back, every image
// after the first that would break a limit is left out, so the ones sent are always
// the newest. Images of turns the window drops later are older than every kept one,
// so they never take the room of an image that is sent.
func leftImages(msgs []store.Message, summarySeq int64) map[*store.Attachment]bool {
	var left map[*store.Attachment]bool
	count, size, full := 0, 0, false
	for i := len(msgs) - 1; i >= 0; i-- {
		m := &msgs[i]
		if m.Role != store.RoleUser || m.Seq <= summarySeq {
			continue
		}
		for k := range m.Attachments {
			f := &m.Attachments[k]
			if f.Kind != store.AttachImage {
				continue
			}
			n := max(len(f.Data), int(f.Size))
			if !full && count < MaxRequestImages && size+n <= MaxRequestImageBytes {
				count, size = count+1, size+n
				continue
			}
			full = true
			if left == nil {
				left = map[*store.Attachment]bool{}
			}
			left[f] = true
		}
	}
	return left
}

// withAttachments is the model's view of user message m: its text files as blocks
// before its text, and its images as image parts, or a line saying an image was left
// out: every image when the model takes no images (noImages), those in left when
// newer images fill the request. It returns the message and the tokens the
// attachments add to its text (their stored counts, the notes') and as images.
func (a *assembler) withAttachments(m *store.Message, noImages bool, left map[*store.Attachment]bool) (msg llm.Message, extra, images int) {
	msg = llm.Message{Role: m.Role, Content: m.Content}
	if len(m.Attachments) == 0 {
		return msg, 0, 0
	}
	var b strings.Builder
	for k := range m.Attachments {
		f := &m.Attachments[k]
		switch {
		case f.Kind == store.AttachText:
			b.WriteString(FileBlock(f.Name, f.MIME, string(f.Data)))
			extra += f.Tokens
		case noImages:
			note := fmt.Sprintf("[Attached image %q not sent: this model does not take images.]\n\n", f.Name)
			b.WriteString(note)
			extra += a.tok.Count(note)
		case left[f]:
			note := fmt.Sprintf("[Attached image %q not sent again: a request carries at most %d images and %d MiB of them, and newer images fill it.]\n\n",
				f.Name, MaxRequestImages, MaxRequestImageBytes>>20)
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
