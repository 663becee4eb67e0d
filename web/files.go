package web

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	_ "image/gif"  // decoders for the upload check
	_ "image/jpeg" //
	_ "image/png"  //
	"io"
	"math"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	_ "golang.org/x/image/webp" // WebP decoder for the upload check

	"atrium/internal/contextwin"
	"atrium/internal/errs"
	"atrium/internal/pdftext"
	"atrium/internal/store"
)

// This file is files attached to a chat message: the upload (checked by content, held
// unsent until a message uses it), the view and download, and the check at send time.

// Limits on attached files. An image is sent to the model base64-encoded, a third
// larger; Anthropic refuses an image whose base64 is over 5 MB (5,242,880 bytes), so
// an image may have at most 3,750,000 bytes (5,000,000 in base64), and a request over
// 32 MB, so one message's files stay at 15 MB (20 MB in base64) and within what
// contextwin sends of images in one request. Providers scale down anything larger
// than about 1,600–2,000 pixels, so more would only cost.
const (
	maxImageBytes      = 3_750_000
	maxUploadBytes     = 5 << 20 // what is read of an upload: a PDF may be this large
	maxTextFileBytes   = 1 << 20
	maxImageSide       = 8000       // pixels, either side
	maxImagePixels     = 24_000_000 // width × height
	maxDecodeBytes     = 96_000_000 // what a decode may allocate: 24 megapixels of 4 bytes
	maxFilesPerMessage = 8
	maxMessageFiles    = 15_000_000 // all the files of one message together
	maxUnsentFiles     = 32         // uploads of one user not yet sent
	unsentFileTTL      = store.UnsentAttachmentTTL
	uploadBodyLimit    = maxUploadBytes + formBodyLimit // one file and the CSRF field
	maxFileNameBytes   = 200
)

// A message's images must fit one request's image budget, or they would be left out
// of the very turn that sends them.
const _ = uint(contextwin.MaxRequestImageBytes - maxMessageFiles)

// fileJSON is what an upload answers: what the composer's chip shows, and the id the
// send names.
type fileJSON struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	Kind   string `json:"kind"`
	MIME   string `json:"mime"`
	Tokens int    `json:"tokens"`
	URL    string `json:"url"`
}

// uploadFile stores one file (form field "file") for chat :id, unsent, and answers
// its chip's data as JSON. The content decides what it is: an image PNG, JPEG, GIF or
// WebP that decodes within the limits, UTF-8 text, or a PDF, whose text is read and
// kept (pdfFile); anything else is refused.
// Uploads older than a day that no message used are deleted on the way.
func (s *Server) uploadFile(c echo.Context) error {
	ss, err := s.ownedSession(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	if n, err := s.Store.PruneUnsentAttachments(ctx, s.Now().Add(-unsentFileTTL)); err != nil {
		s.Log.Warn("web: prune unsent files", "err", err)
	} else if n > 0 {
		s.Log.Info("web: unsent files expired", "count", n)
	}
	fh, err := c.FormFile("file")
	if err != nil {
		return errs.E(errs.Invalid, "No file was received: choose a file to attach.")
	}
	f, err := fh.Open()
	if err != nil {
		return errs.Wrap(errs.Invalid, err, "The file could not be read.")
	}
	data, err := io.ReadAll(io.LimitReader(f, maxUploadBytes+1))
	f.Close()
	if err != nil {
		return errs.Wrap(errs.Invalid, err, "The file could not be read.")
	}
	// Checked again when it is stored (parallel uploads); this spares the decode.
	if pending, err := s.Store.CountUnsentAttachments(ctx, ss.OwnerID); err != nil {
		return err
	} else if pending >= maxUnsentFiles {
		return errs.E(errs.Conflict, "You have %d attached files that are not sent yet: send or remove some first.", pending)
	}
	var a store.Attachment
	if pdftext.IsPDF(data) {
		a, err = s.pdfFile(ctx, fileName(fh.Filename), data)
	} else {
		a, err = checkFile(ctx, fileName(fh.Filename), data)
	}
	if err != nil {
		return err
	}
	if a.Kind == store.AttachText {
		a.Tokens = contextwin.NewTokenizer().Count(contextwin.FileBlock(a.Name, a.MIME, string(a.Data)))
		if limit := s.fileTokenLimit(ctx, ss.Model); a.Tokens > limit {
			return errs.E(errs.TooLarge, "%s is about %d tokens: more than this chat's model can take in one message (at most %d tokens of files, half of its context). Attach a part of it.",
				a.Name, a.Tokens, limit)
		}
	}
	a.ID, a.OwnerID, a.SessionID = uuid.NewString(), ss.OwnerID, ss.ID
	if err := s.Store.CreateAttachment(ctx, &a, maxUnsentFiles); err != nil {
		if errs.Is(err, errs.NotFound) {
			return echo.ErrNotFound
		}
		return err
	}
	return c.JSON(http.StatusOK, fileJSON{ID: a.ID, Name: a.Name, Size: a.Size, Kind: a.Kind, MIME: a.MIME,
		Tokens: a.Tokens, URL: fileURL(a.ID)})
}

// pdfFile reads the text of an uploaded PDF in a limited child process
// (internal/pdftext) and returns it as a text attachment of type store.PDFText; the
// PDF itself is not kept. A PDF that cannot be read, breaks a limit or has no text
// is errs.Invalid with the reason ("report.pdf: this PDF could not be read: …").
func (s *Server) pdfFile(ctx context.Context, name string, data []byte) (store.Attachment, error) {
	a := store.Attachment{Name: name}
	start := time.Now()
	text, err := s.PDF.Text(ctx, data)
	var perr *pdftext.Error
	if errors.As(err, &perr) {
		s.Log.Info("web: pdf refused", "bytes", len(data), "took", time.Since(start), "reason", perr.Reason)
		return a, errs.E(errs.Invalid, "%s: %s", name, perr.Error())
	}
	if err != nil {
		return a, fmt.Errorf("web: read pdf: %w", err)
	}
	s.Log.Info("web: pdf read", "bytes", len(data), "text_bytes", len(text), "took", time.Since(start))
	a.Kind, a.MIME, a.Data = store.AttachText, store.PDFText, []byte(text)
	return a, nil
}

// fileURL is where a file is viewed or downloaded.
func fileURL(id string) string { return "/files/" + id }

// fileName keeps the base of a browser's file name, without control characters, at
// most maxFileNameBytes; "" becomes "file".
func fileName(raw string) string {
	name := path.Base(strings.ReplaceAll(raw, "\\", "/"))
	name = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == utf8.RuneError || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) {
			return -1
		}
		return r
	}, name)
	if len(name) > maxFileNameBytes {
		cut := maxFileNameBytes
		for cut > 0 && !utf8.RuneStart(name[cut]) {
			cut--
		}
		name = name[:cut]
	}
	if name == "" || name == "." || name == "/" {
		name = "file"
	}
	return name
}

// imageTypes are the raster formats models take, by the type the content sniffs as.
var imageTypes = map[string]string{"image/png": "png", "image/jpeg": "jpeg", "image/gif": "gif", "image/webp": "webp"}

// imageDecodes bounds how many images decode at once (each may take maxDecodeBytes),
// as the PDF reader bounds its children.
var imageDecodes = make(chan struct{}, 2)

// decodeBytes is about what decoding an image of cfg allocates: its pixels times the
// bytes of one pixel in the decoder's color model (a 16-bit PNG takes 8 a pixel).
func decodeBytes(cfg image.Config) int64 {
	per := int64(8) // any other model: assume the widest
	switch cfg.ColorModel {
	case color.GrayModel, color.AlphaModel:
		per = 1
	case color.Gray16Model, color.Alpha16Model:
		per = 2
	case color.YCbCrModel:
		per = 3 // 4:4:4 at most
	case color.RGBAModel, color.NRGBAModel, color.CMYKModel, color.NYCbCrAModel:
		per = 4
	}
	if _, ok := cfg.ColorModel.(color.Palette); ok {
		per = 1
	}
	return int64(cfg.Width) * int64(cfg.Height) * per
}

// checkFile decides what data is by its content, never by its name or the browser's
// claim, and checks it: an image must decode whole within the pixel and memory limits
// (at most two at once; waiting ends with ctx); text must be UTF-8 without NUL bytes
// (a byte-order mark is dropped). Errors are errs.Invalid or errs.TooLarge and say
// what is accepted.
func checkFile(ctx context.Context, name string, data []byte) (store.Attachment, error) {
	a := store.Attachment{Name: name}
	sniffed := http.DetectContentType(data)
	if format, ok := imageTypes[sniffed]; ok {
		if len(data) > maxImageBytes {
			return a, errs.E(errs.TooLarge, "%s is larger than %s, the limit for an image (what a model takes).", name, megabytes(maxImageBytes))
		}
		cfg, got, err := image.DecodeConfig(bytes.NewReader(data))
		if err != nil || got != format {
			return a, errs.E(errs.Invalid, "%s is not a readable %s image.", name, strings.ToUpper(format))
		}
		if cfg.Width <= 0 || cfg.Height <= 0 || cfg.Width > maxImageSide || cfg.Height > maxImageSide || cfg.Width*cfg.Height > maxImagePixels {
			return a, errs.E(errs.TooLarge, "%s is %d×%d pixels: at most %d on a side and %d megapixels.", name, cfg.Width, cfg.Height, maxImageSide, maxImagePixels/1_000_000)
		}
		if n := decodeBytes(cfg); n > maxDecodeBytes {
			return a, errs.E(errs.TooLarge, "%s is %d×%d pixels of %d bytes each, %s to decode: at most %s. Save it with 8 bits per channel or smaller.",
				name, cfg.Width, cfg.Height, n/(int64(cfg.Width)*int64(cfg.Height)), megabytes(n), megabytes(maxDecodeBytes))
		}
		select {
		case imageDecodes <- struct{}{}:
		case <-ctx.Done():
			return a, fmt.Errorf("web: check image: %w", ctx.Err())
		}
		// The whole image must decode: a file that only starts like one is refused here,
		// not by the provider in the middle of a chat.
		_, _, err = image.Decode(bytes.NewReader(data))
		<-imageDecodes
		if err != nil {
			return a, errs.E(errs.Invalid, "%s is not a readable %s image (%s).", name, strings.ToUpper(format), err.Error())
		}
		a.Kind, a.MIME, a.Width, a.Height, a.Data = store.AttachImage, sniffed, cfg.Width, cfg.Height, data
		a.Tokens = contextwin.ImageTokens(cfg.Width, cfg.Height)
		return a, nil
	}
	text := bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	// A file over the limit is judged by its head (cut at a character): what was read
	// of a larger upload may end inside a character, and it is too large, not binary.
	head := text
	if len(head) > maxTextFileBytes {
		cut := maxTextFileBytes
		for cut > maxTextFileBytes-utf8.UTFMax && !utf8.RuneStart(head[cut]) {
			cut--
		}
		head = head[:cut]
	}
	if !utf8.Valid(head) || bytes.IndexByte(head, 0) >= 0 {
		what := "a binary file"
		if sniffed == "application/pdf" {
			what = "a PDF (an import carries a PDF's text, as Atrium exports it, not the PDF)"
		}
		return a, errs.E(errs.Invalid, "%s is %s. You can attach text files (UTF-8: code, markdown, CSV, …) and PNG, JPEG, GIF or WebP images.", name, what)
	}
	if len(data) > maxTextFileBytes {
		return a, errs.E(errs.TooLarge, "%s is larger than %s, the limit for a text file.", name, byteSize(maxTextFileBytes))
	}
	a.Kind, a.MIME, a.Data = store.AttachText, textType(name), text
	return a, nil
}

// megabytes writes n bytes in MB (10⁶ bytes), as the providers state their limits:
// 3750000 is "3.75 MB".
func megabytes(n int64) string {
	return strconv.FormatFloat(math.Round(float64(n)/1e4)/100, 'f', -1, 64) + " MB"
}

// textType names a text file's kind for the model from its extension (the content is
// known to be text already): what it is, not how it is served.
func textType(name string) string {
	switch ext := strings.ToLower(path.Ext(name)); ext {
	case ".md", ".markdown":
		return "text/markdown"
	case ".csv":
		return "text/csv"
	case ".tsv":
		return "text/tab-separated-values"
	case ".json":
		return "application/json"
	case ".html", ".htm":
		return "text/html"
	case ".svg":
		return "image/svg+xml"
	case ".xml":
		return "text/xml"
	case "", ".txt", ".log":
		return "text/plain"
	default:
		if t := mime.TypeByExtension(ext); strings.HasPrefix(t, "text/") {
			t, _, _ = strings.Cut(t, ";")
			return t
		}
		return "text/plain"
	}
}

// fileTokenLimit is the most the files of one message may cost: half of what the
// chat's model has for history (its window less the reply reserve), so the message
// and some history still fit.
func (s *Server) fileTokenLimit(ctx context.Context, model string) int {
	b := contextwin.DefaultBudgets()
	if s.Config.ContextWindow > 0 {
		b = b.WithWindow(s.Config.ContextWindow)
	}
	if s.Providers != nil {
		if w := s.Providers.Window(ctx, model); w > 0 {
			b = b.WithWindow(w)
		}
	}
	return (b.Window - b.ReplyReserve) / 2
}

// showFile serves a file of the logged-in user: another user's, or one that does not
// exist, is a 404. Images are served as their sniffed type, to be shown; anything else
// as plain text to download (an HTML or SVG file never runs). No response may be
// sniffed into something else, framed, or run scripts.
func (s *Server) showFile(c echo.Context) error {
	u, _ := currentUser(c)
	a, err := s.Store.Attachment(c.Request().Context(), c.Param("fid"), u.ID)
	if errs.Is(err, errs.NotFound) {
		return echo.ErrNotFound
	}
	if err != nil {
		return err
	}
	h := c.Response().Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; img-src 'self'; style-src 'unsafe-inline'; sandbox")
	ctype, disposition := "text/plain; charset=utf-8", "attachment"
	if _, ok := imageTypes[a.MIME]; ok && a.Kind == store.AttachImage && c.QueryParam("download") == "" {
		ctype, disposition = a.MIME, "inline"
	}
	name := a.Name
	if a.MIME == store.PDFText {
		name += ".txt" // what is kept of a PDF is its text
	}
	h.Set("Content-Disposition", mime.FormatMediaType(disposition, map[string]string{"filename": name}))
	return c.Blob(http.StatusOK, ctype, a.Data)
}

// removeFile deletes an upload of the logged-in user that no message uses yet (the
// chip's remove button). A sent file, or another user's, is a 404.
func (s *Server) removeFile(c echo.Context) error {
	u, _ := currentUser(c)
	err := s.Store.DeleteUnsentAttachment(c.Request().Context(), c.Param("fid"), u.ID)
	if errs.Is(err, errs.NotFound) {
		return echo.ErrNotFound
	}
	if err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// checkSendFiles checks the uploads a send names (ids) for chat ss: each an unsent
// upload of this chat and user, at most maxFilesPerMessage and maxMessageFiles
// together, within the model's file budget, and images only for a model that takes
// them. Errors say what to change; nothing is sent.
func (s *Server) checkSendFiles(ctx context.Context, ss store.Session, ids []string) ([]string, error) {
	seen := map[string]bool{}
	var uniq []string
	for _, id := range ids {
		if id = strings.TrimSpace(id); id != "" && !seen[id] {
			seen[id] = true
			uniq = append(uniq, id)
		}
	}
	if len(uniq) == 0 {
		return nil, nil
	}
	if len(uniq) > maxFilesPerMessage {
		return nil, errs.E(errs.Invalid, "At most %d files can be attached to one message; nothing was sent.", maxFilesPerMessage)
	}
	atts, err := s.Store.UnsentAttachments(ctx, ss.ID, ss.OwnerID, uniq)
	if err != nil {
		return nil, err
	}
	var size int64
	tokens, images := 0, 0
	for _, a := range atts {
		size += a.Size
		tokens += a.Tokens
		if a.Kind == store.AttachImage {
			images++
		}
	}
	if size > maxMessageFiles {
		return nil, errs.E(errs.TooLarge, "The attached files come to %s: at most %s per message. Nothing was sent.", megabytes(size), megabytes(maxMessageFiles))
	}
	if limit := s.fileTokenLimit(ctx, ss.Model); tokens > limit {
		return nil, errs.E(errs.TooLarge, "The attached files are about %d tokens: this chat's model takes at most %d tokens of files in one message (half of its context). Remove some; nothing was sent.",
			tokens, limit)
	}
	if images > 0 && (s.Providers == nil || !s.Providers.Vision(ctx, ss.Model)) {
		return nil, errs.E(errs.Invalid, "%s", noVisionMessage)
	}
	return uniq, nil
}

// noVisionMessage says why an image cannot be sent and what to do.
var noVisionMessage = fmt.Sprint("This chat's model does not take images. Pick a model that does in the chat's header, ",
	"or remove the image; nothing was sent. (An admin marks a model of an OpenAI-compatible provider as vision-capable ",
	"by adding \"vision\" after its name in Settings → Providers; Anthropic models all take images.)")

// withFiles fills the Attachments of the page's user messages (without their data),
// for the chips and thumbnails.
func (s *Server) withFiles(ctx context.Context, sessionID string, msgs []store.Message) error {
	var ids []int64
	for _, m := range msgs {
		if m.Role == store.RoleUser {
			ids = append(ids, m.ID)
		}
	}
	atts, err := s.Store.MessageAttachments(ctx, sessionID, ids)
	if err != nil {
		return err
	}
	for i := range msgs {
		if a, ok := atts[msgs[i].ID]; ok {
			msgs[i].Attachments = a
		}
	}
	return nil
}
