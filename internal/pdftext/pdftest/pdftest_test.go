package pdftest

import (
	"bytes"
	"compress/zlib"
	"io"
	"testing"
)

func TestBombInflatesToItsSize(t *testing.T) {
	b := Bomb("BT (", 64<<20, 'x')
	r, err := zlib.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, r) // checks the Adler-32 at the end
	if n != 64<<20+4 || err != nil {
		t.Fatalf("inflated %d bytes, err %v", n, err)
	}
	if len(b) > 128<<10 {
		t.Errorf("the bomb is %d bytes", len(b))
	}
}
