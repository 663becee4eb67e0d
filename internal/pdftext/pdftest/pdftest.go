// Package pdftest writes small PDFs for tests: real ones with a text layer, and
// hostile ones, by hand (objects, a cross-reference table and a trailer), so a test
// can say exactly what a file holds.
package pdftest

import (
	"bytes"
	"compress/flate"
	"compress/zlib"
	"encoding/binary"
	"fmt"
	"hash/adler32"
	"strings"
)

// Object is one indirect object's body (what goes between "N 0 obj" and "endobj").
type Object string

// Stream is an object with a stream: dict entries besides /Length, and the raw data.
func Stream(dict string, data []byte) Object {
	return Object(fmt.Sprintf("<< %s /Length %d >>\nstream\n%s\nendstream", dict, len(data), data))
}

// Build writes a PDF of objects numbered from 1, object 1 the catalog.
func Build(objs []Object) []byte {
	var b bytes.Buffer
	b.WriteString("%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
	offs := make([]int, len(objs))
	for i, o := range objs {
		offs[i] = b.Len()
		fmt.Fprintf(&b, "%d 0 obj\n%s\nendobj\n", i+1, o)
	}
	xref := b.Len()
	fmt.Fprintf(&b, "xref\n0 %d\n0000000000 65535 f \n", len(objs)+1)
	for _, o := range offs {
		fmt.Fprintf(&b, "%010d 00000 n \n", o)
	}
	fmt.Fprintf(&b, "trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n", len(objs)+1, xref)
	return b.Bytes()
}

// Text is a PDF with one page per string, each line of it drawn in Helvetica (a
// text layer, as a word processor writes one). compress deflates the page contents.
func Text(compress bool, pages ...string) []byte {
	objs := []Object{"<< /Type /Catalog /Pages 2 0 R >>", "", "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"}
	var kids []string
	for _, p := range pages {
		var c strings.Builder
		c.WriteString("BT /F1 11 Tf 14 TL 72 760 Td\n")
		for _, line := range strings.Split(p, "\n") {
			fmt.Fprintf(&c, "(%s) Tj T*\n", escape(line))
		}
		c.WriteString("ET")
		content := Stream("", []byte(c.String()))
		if compress {
			content = Stream("/Filter /FlateDecode", Deflate([]byte(c.String())))
		}
		objs = append(objs, content)
		contentRef := len(objs)
		objs = append(objs, Object(fmt.Sprintf("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>", contentRef)))
		kids = append(kids, fmt.Sprintf("%d 0 R", len(objs)))
	}
	objs[1] = Object(fmt.Sprintf("<< /Type /Pages /Kids [%s] /Count %d >>", strings.Join(kids, " "), len(kids)))
	return Build(objs)
}

// Page is a PDF of one page whose contents are the object given (a stream, or an
// array of references to streams).
func Page(contents Object) []byte {
	return Build([]Object{
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
		"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 5 0 R >> >> /Contents 4 0 R >>",
		contents,
		"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
	})
}

// Deflate is data zlib-compressed at the best ratio (FlateDecode's format).
func Deflate(data []byte) []byte {
	var b bytes.Buffer
	w, _ := zlib.NewWriterLevel(&b, flate.BestCompression)
	w.Write(data)
	w.Close()
	return b.Bytes()
}

// Bomb is zlib data that inflates to prefix and n bytes of fill (n a multiple of 1 MiB), a
// thousand times smaller. It compresses only the first MiBs: once the window is all
// fill, each further MiB compresses (with a sync flush) to the same bytes, which are
// repeated; the checksum is computed over the fill without holding it.
func Bomb(prefix string, n int64, fill byte) []byte {
	chunk := bytes.Repeat([]byte{fill}, 1<<20)
	var raw bytes.Buffer
	w, _ := flate.NewWriter(&raw, flate.BestCompression)
	w.Write([]byte(prefix))
	w.Write(chunk)
	w.Flush()
	w.Write(chunk)
	w.Flush()
	mark := raw.Len()
	w.Write(chunk)
	w.Flush()
	repeat := append([]byte(nil), raw.Bytes()[mark:]...)
	w.Write(chunk)
	w.Flush()
	if !bytes.Equal(raw.Bytes()[mark+len(repeat):], repeat) {
		panic("pdftest: the compressor's output for a repeated chunk changed")
	}
	var b bytes.Buffer
	b.Write([]byte{0x78, 0xda}) // zlib header, best compression
	b.Write(raw.Bytes()[:mark])
	sum := adler32.New()
	sum.Write([]byte(prefix))
	sum.Write(chunk)
	sum.Write(chunk)
	for i := int64(2); i < n>>20; i++ {
		b.Write(repeat)
		sum.Write(chunk)
	}
	b.Write([]byte{0x03, 0x00}) // a final, empty fixed-Huffman block
	binary.Write(&b, binary.BigEndian, sum.Sum32())
	return b.Bytes()
}

func escape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `(`, `\(`, `)`, `\)`).Replace(s)
}
