package contextwin_test

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"atrium/internal/contextwin"
	"atrium/internal/store"
)

func withFiles(m store.Message, files ...store.Attachment) store.Message {
	m.Attachments = files
	return m
}

func textFile(name, text string, tok contextwin.Tokenizer) store.Attachment {
	return store.Attachment{Name: name, Kind: store.AttachText, MIME: "text/plain", Data: []byte(text),
		Tokens: tok.Count(contextwin.FileBlock(name, "text/plain", text))}
}

func imageFile(name string, tokens int) store.Attachment {
	return store.Attachment{Name: name, Kind: store.AttachImage, MIME: "image/png", Data: []byte("png:" + name), Tokens: tokens}
}

// A user message's files go with it: text files as blocks before its text, images as
// parts; their tokens count in the turn (a "files" row in the meter), so a turn too big
// for the window leaves whole, files and all; a model without vision gets a line
// instead of each image.
func TestAttachmentsTravelWithTheirTurn(t *testing.T) {
	tok := wordTok{}
	b := contextwin.Budgets{Pinned: 100, Summary: 100, RecentTurns: 6, Window: 400, ReplyReserve: 50}
	msgs := []store.Message{
		withFiles(user(1, "old question"), textFile("big.txt", words("f", 200), tok), imageFile("old.png", 100)),
		asst(2, "old answer"),
		withFiles(user(3, "what is this"), imageFile("new.png", 50)),
	}
	out, rep := contextwin.Assemble(contextwin.Input{Messages: msgs}, b, tok)
	// 350 tokens are left for history; turn 1 costs ~300+, turn 2 ~55: only turn 2 fits.
	if !slices.Equal(rep.Included, []int64{3}) {
		t.Fatalf("included %v, want [3] (turn 1 leaves whole, with its files)", rep.Included)
	}
	last := out[len(out)-1]
	if last.Content != "what is this" || len(last.Images) != 1 || string(last.Images[0].Data) != "png:new.png" || last.Images[0].MediaType != "image/png" {
		t.Errorf("newest message = %+v", last)
	}
	zones := map[string]int{}
	for _, z := range rep.Zones {
		zones[z.Name] = z.Tokens
	}
	if zones[contextwin.ZoneFiles] != 50 || zones[contextwin.ZoneHistory] != 3+contextwin.MessageOverhead {
		t.Errorf("zones = %v, want files 50 and history 6", zones)
	}

	// With room, the text file is a fenced block before the question, named.
	b.Window = 2000
	out, _ = contextwin.Assemble(contextwin.Input{Messages: msgs}, b, tok)
	first := out[0]
	if !strings.HasPrefix(first.Content, "Attached file \"big.txt\" (text/plain, ") || !strings.HasSuffix(first.Content, "```\n\nold question") ||
		len(first.Images) != 1 {
		t.Errorf("first message = %.200q… images %d", first.Content, len(first.Images))
	}

	// No vision: a line per image instead of the image.
	out, _ = contextwin.Assemble(contextwin.Input{Messages: msgs, NoImages: true}, b, tok)
	last = out[len(out)-1]
	if len(last.Images) != 0 || !strings.Contains(last.Content, `[Attached image "new.png" not sent: this model does not take images.]`) {
		t.Errorf("without vision = %+v", last)
	}

	// A message of files alone is not "empty".
	_, rep = contextwin.Assemble(contextwin.Input{Messages: []store.Message{withFiles(user(1, ""), imageFile("a.png", 10))}}, b, tok)
	if !slices.Equal(rep.Included, []int64{1}) {
		t.Errorf("a files-only message: included %v, cuts %v", rep.Included, rep.Cut)
	}
}

// The image estimate is the larger of Anthropic's and OpenAI's counts.
func TestImageTokens(t *testing.T) {
	for _, c := range []struct{ w, h, want int }{
		{1, 1, 85 + 170},                // OpenAI's one tile wins
		{1024, 1024, 1399},              // Anthropic: 1024·1024/750
		{4000, 3000, 1568*1176/750 + 1}, // scaled to 1568 on the long side
	} {
		if got := contextwin.ImageTokens(c.w, c.h); got != c.want {
			t.Errorf("ImageTokens(%d, %d) = %d, want %d", c.w, c.h, got, c.want)
		}
	}
}

// One request carries at most MaxRequestImages images and MaxRequestImageBytes of
// them (Anthropic refuses more, and would refuse every later turn of the chat): the
// newest are sent, each older one is a note in its message's text, and the meter counts
// the notes, not the images left out.
func TestRequestImageLimits(t *testing.T) {
	tok := wordTok{}
	b := contextwin.Budgets{Pinned: 100, Summary: 100, RecentTurns: 100, Window: 1_000_000, ReplyReserve: 50}
	cases := []struct {
		name     string
		turns    int
		perImage int // bytes
		sent     int // newest turns whose image goes
	}{
		{"count", 25, 1 << 10, contextwin.MaxRequestImages},
		{"bytes", 12, 3_750_000, contextwin.MaxRequestImageBytes / 3_750_000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var msgs []store.Message
			for i := range c.turns {
				f := imageFile(fmt.Sprintf("p%d.png", i+1), 1000)
				f.Data = bytes.Repeat([]byte{byte(i)}, c.perImage)
				msgs = append(msgs, withFiles(user(int64(2*i+1), "look"), f), asst(int64(2*i+2), "ok"))
			}
			out, rep := contextwin.Assemble(contextwin.Input{Messages: msgs}, b, tok)
			if len(rep.Included) != 2*c.turns {
				t.Fatalf("included %d of %d messages", len(rep.Included), 2*c.turns)
			}
			images, size, notes, noteTokens := 0, 0, 0, 0
			for _, m := range out {
				if m.Role != "user" {
					continue
				}
				for _, img := range m.Images {
					images++
					size += len(img.Data)
				}
				if strings.Contains(m.Content, "not sent again") {
					notes++
					noteTokens += tok.Count(strings.TrimSuffix(m.Content, "look"))
				}
			}
			if images != c.sent || size > contextwin.MaxRequestImageBytes || images > contextwin.MaxRequestImages || notes != c.turns-c.sent {
				t.Fatalf("sent %d images (%d bytes) and %d notes, want %d images and %d notes", images, size, notes, c.sent, c.turns-c.sent)
			}
			users := out[len(out)-2*c.turns:]
			for i := range c.turns {
				m := users[2*i]
				kept := i >= c.turns-c.sent
				if kept && (len(m.Images) != 1 || m.Images[0].Data[0] != byte(i)) {
					t.Errorf("turn %d: its image is not sent (it is among the newest)", i+1)
				}
				if note := fmt.Sprintf(`[Attached image "p%d.png" not sent again: a request carries at most 20 images and 18 MiB of them, and newer images fill it.]`, i+1); !kept && (len(m.Images) != 0 || !strings.HasPrefix(m.Content, note)) {
					t.Errorf("turn %d (older) = %.200q with %d images, want the note", i+1, m.Content, len(m.Images))
				}
			}
			zones := map[string]int{}
			for _, z := range rep.Zones {
				zones[z.Name] = z.Tokens
			}
			if want := 1000*c.sent + noteTokens; zones[contextwin.ZoneFiles] != want {
				t.Errorf("files zone = %d tokens, want %d (the images sent and the notes)", zones[contextwin.ZoneFiles], want)
			}
		})
	}
}
