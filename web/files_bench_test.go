package web_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"strings"
	"testing"
	"time"
)

// noisePNG is a w×h PNG of random pixels: it hardly compresses (~3 bytes a pixel).
func noisePNG(tb testing.TB, w, h int) []byte {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	seed := uint32(7)
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			seed = seed*1664525 + 1013904223
			img.Set(x, y, color.RGBA{R: uint8(seed >> 24), G: uint8(seed >> 16), B: uint8(seed >> 8), A: 255})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

// BenchmarkFileUploadSend: the whole path of an attached file through the real server
// and the fake model: the upload over HTTP (sniffed, decode-checked, counted, stored),
// then a message naming it over the websocket until the reply is final (bound to the
// message, loaded into the context, base64-encoded into the request, recorded in the
// run). Each iteration uses a new chat. upload-ms is the upload alone.
func BenchmarkFileUploadSend(b *testing.B) {
	var text strings.Builder
	for i := 0; text.Len() < 100_000; i++ {
		fmt.Fprintf(&text, "%d,item-%d,%d.%02d,some words of a description\n", i, i*7, i%1000, i%100)
	}
	for _, c := range []struct {
		name, file string
		data       []byte
	}{
		{"image-1MB", "noise.png", noisePNG(b, 578, 578)},
		{"text-100KB", "table.csv", []byte(text.String()[:100_000])},
	} {
		b.Run(c.name, func(b *testing.B) {
			env := newTestEnv(b)
			admin := env.setup()
			admin.addProvider("Fake", env.llm.URL(), "fake-model vision window=128k", "")
			env.llm.Unrecorded = true
			b.SetBytes(int64(len(c.data)))
			var upload time.Duration
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				id := admin.newSession()
				ws := admin.dial(id)
				b.StartTimer()
				start := time.Now()
				r := admin.upload(id, c.file, c.data)
				upload += time.Since(start)
				if r.StatusCode != http.StatusOK {
					b.Fatalf("upload: %d %s", r.StatusCode, r.body)
				}
				var u struct{ ID string }
				if err := json.Unmarshal([]byte(r.body), &u); err != nil {
					b.Fatal(err)
				}
				ws.sendFiles("what is this?", u.ID)
				ws.until(finalMarker)
				b.StopTimer()
				ws.conn.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(upload.Microseconds())/1000/float64(b.N), "upload-ms")
		})
	}
}
