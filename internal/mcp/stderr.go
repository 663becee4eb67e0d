package mcp

import (
	"bufio"
	"io"
	"strings"
	"sync"
	"unicode/utf8"
)

// Bounds of a stdio child's stderr log.
const (
	stderrLines    = 200 // lines kept
	stderrLineSize = 500 // bytes kept of each line
)

// stderrRing keeps the last stderrLines lines a child wrote to stderr, each with
// the server's secrets redacted and then cut to stderrLineSize bytes (in that
// order, so a secret straddling the cut shows no prefix). It is safe for
// concurrent use.
type stderrRing struct {
	secrets []string
	mu      sync.Mutex
	lines   []string
	next    int // where the next line goes once full
}

func newStderrRing(secrets []string) *stderrRing { return &stderrRing{secrets: secrets} }

// keep is how much of a line is read before redaction: enough that any secret
// starting inside the kept part is whole.
func (r *stderrRing) keep() int {
	n := stderrLineSize + 4
	for _, s := range r.secrets {
		n = max(n, stderrLineSize+len(s))
	}
	return n
}

func (r *stderrRing) add(line string) {
	line = redact(strings.TrimRight(line, "\r\n"), r.secrets)
	if len(line) > stderrLineSize {
		cut := stderrLineSize
		for cut > 0 && !utf8.RuneStart(line[cut]) {
			cut--
		}
		line = line[:cut] + "…"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lines) < stderrLines {
		r.lines = append(r.lines, line)
		return
	}
	r.lines[r.next] = line
	r.next = (r.next + 1) % stderrLines
}

// snapshot returns the kept lines, oldest first.
func (r *stderrRing) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.lines))
	out = append(out, r.lines[r.next:]...)
	return append(out, r.lines[:r.next]...)
}

// drain reads src line by line into the ring until EOF or an error, never
// holding more than one bounded line in memory.
func (r *stderrRing) drain(src io.Reader) {
	br := bufio.NewReaderSize(src, 4096)
	var b strings.Builder
	keep := r.keep()
	for {
		chunk, isPrefix, err := br.ReadLine()
		if len(chunk) > 0 && b.Len() < keep {
			b.Write(chunk[:min(len(chunk), keep-b.Len())])
		}
		if err != nil {
			if b.Len() > 0 {
				r.add(b.String())
			}
			return
		}
		if !isPrefix {
			r.add(b.String())
			b.Reset()
		}
	}
}
