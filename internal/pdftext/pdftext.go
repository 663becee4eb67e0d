// Package pdftext reads the text of an uploaded PDF in a child process of Atrium
// ("atrium pdf-text"), because the parser (github.com/ledongthuc/pdf, pure Go) panics
// on malformed files and bounds neither its decompression nor the text it builds.
//
// The child limits itself before it reads a byte of the PDF: address space
// (RLIMIT_AS) and CPU time (RLIMIT_CPU), no file writes (RLIMIT_FSIZE 0), a small
// goroutine stack, and, where the kernel has Landlock, no file opens and no network
// (sandbox.DenyAll). It reads the PDF on stdin and writes the text on stdout. The parent
// (Extractor) adds a wall-clock timeout, caps what it reads back, runs at most a few
// children at once and turns every way the child can fail into an *Error that says
// why in words for the uploader. A crash of the parser is a crash of the child only.
package pdftext

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ledongthuc/pdf"

	"atrium/internal/sandbox"
)

// Subcommand is the first argument that makes atrium run Main.
const Subcommand = "pdf-text"

// MIME is the type of a PDF, as http.DetectContentType names it.
const MIME = "application/pdf"

// IsPDF reports whether data starts like a PDF ("%PDF-", what the sniffer checks).
func IsPDF(data []byte) bool { return bytes.HasPrefix(data, []byte("%PDF-")) }

// Limits bound one extraction.
type Limits struct {
	Timeout  time.Duration // wall clock, from start to the last byte read
	CPU      time.Duration // RLIMIT_CPU of the child (whole seconds, at least 1)
	Memory   int64         // RLIMIT_AS of the child, bytes
	MaxInput int           // bytes of PDF
	MaxPages int           // a PDF with more pages is refused
	MaxText  int           // bytes of text; more is refused (never cut)
}

// DefaultLimits are what uploads use: a 5 MiB PDF of up to 300 pages and 1 MiB of
// text (the text-file limit), in 15 s of wall clock, 10 s of CPU and 512 MiB.
func DefaultLimits() Limits {
	return Limits{Timeout: 15 * time.Second, CPU: 10 * time.Second, Memory: 512 << 20,
		MaxInput: 5 << 20, MaxPages: 300, MaxText: 1 << 20}
}

// Error is an extraction that failed for a reason the uploader should read:
// Error() is "this PDF could not be read: " and the reason.
type Error struct{ Reason string }

func (e *Error) Error() string { return "this PDF could not be read: " + e.Reason }

// Extractor runs the child. The zero value is not usable: Self must be Atrium's own
// executable (or a test binary whose TestMain hands Subcommand to Main). Safe for
// concurrent use; at most Parallel children run at once (2 when zero), the others wait
// for a slot or their context.
type Extractor struct {
	Self     string
	Limits   Limits
	Parallel int

	slots chan struct{}
	once  sync.Once
}

// Text returns the text of the PDF in data. A PDF that cannot be read, that breaks
// a limit, or that has no text layer is an *Error; a context that ends first is the
// context's error; failing to start the child is another error.
func (x *Extractor) Text(ctx context.Context, data []byte) (string, error) {
	lim := x.Limits
	if len(data) > lim.MaxInput {
		return "", &Error{fmt.Sprintf("it is larger than %s (the limit for a PDF).", mib(int64(lim.MaxInput)))}
	}
	if !IsPDF(data) {
		return "", &Error{"it does not start like a PDF (%PDF-)."}
	}
	x.once.Do(func() {
		n := x.Parallel
		if n <= 0 {
			n = 2
		}
		x.slots = make(chan struct{}, n)
	})
	select {
	case x.slots <- struct{}{}:
		defer func() { <-x.slots }()
	case <-ctx.Done():
		return "", ctx.Err()
	}

	ctx, cancel := context.WithTimeout(ctx, lim.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, x.Self, Subcommand,
		"--mem", strconv.FormatInt(lim.Memory, 10),
		"--cpu", strconv.Itoa(max(1, int(lim.CPU/time.Second))),
		"--pages", strconv.Itoa(lim.MaxPages),
		"--text", strconv.Itoa(lim.MaxText))
	cmd.Env = []string{"GOMAXPROCS=1", "GOTRACEBACK=none"}
	cmd.Stdin = bytes.NewReader(data)
	stderr := &capped{max: 2048}
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with Atrium
	cmd.WaitDelay = time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", fmt.Errorf("pdftext: %w", err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("pdftext: start %s: %w", x.Self, err)
	}
	text, readErr := io.ReadAll(io.LimitReader(out, int64(lim.MaxText)+1))
	tooMuch := len(text) > lim.MaxText
	if tooMuch {
		_ = cmd.Process.Kill() // it would write on; what it wrote is refused anyway
	}
	if readErr == nil {
		_, readErr = io.Copy(io.Discard, out) // EOF when the child exits
	}
	waitErr := cmd.Wait()
	switch {
	case ctx.Err() != nil && !tooMuch:
		if errors.Is(ctx.Err(), context.DeadlineExceeded) && time.Since(start) >= lim.Timeout {
			return "", &Error{fmt.Sprintf("reading it took longer than %v.", lim.Timeout)}
		}
		return "", ctx.Err()
	case tooMuch:
		return "", &Error{fmt.Sprintf("it has more than %s of text (the limit for an attached file). Attach a part of it.", mib(int64(lim.MaxText)))}
	case waitErr != nil:
		return "", childError(waitErr, stderr.String(), lim)
	case readErr != nil:
		return "", fmt.Errorf("pdftext: read: %w", readErr)
	}
	s := Clean(string(text))
	if strings.TrimSpace(s) == "" {
		return "", &Error{"it has no text layer (a scanned document or only images?). Atrium reads the text of a PDF, not its pictures: attach the pages as images, or the text as a .txt file."}
	}
	return s, nil
}

// childError says why the child failed, from how it ended and what it wrote on
// stderr: a refusal (exit 3) carries its own reason; the rest are crashes.
func childError(waitErr error, stderr string, lim Limits) error {
	var ee *exec.ExitError
	if !errors.As(waitErr, &ee) {
		return fmt.Errorf("pdftext: %w", waitErr)
	}
	first, _, _ := strings.Cut(strings.TrimSpace(stderr), "\n")
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		switch ws.Signal() {
		case syscall.SIGXCPU, syscall.SIGKILL:
			return &Error{fmt.Sprintf("reading it took more than %d seconds of processor time.", int(lim.CPU/time.Second))}
		}
		return &Error{fmt.Sprintf("the reader stopped (%s).", ws.Signal())}
	}
	switch {
	case ee.ExitCode() == exitRefused && first != "":
		return &Error{first}
	case strings.Contains(stderr, "out of memory") || strings.Contains(stderr, "cannot allocate memory"):
		return &Error{fmt.Sprintf("reading it needed more than %s of memory.", mib(lim.Memory))}
	case strings.Contains(stderr, "stack overflow") || strings.Contains(stderr, "stack exceeds"):
		return &Error{"it is nested too deeply."}
	case strings.Contains(stderr, "CPU time limit"):
		return &Error{fmt.Sprintf("reading it took more than %d seconds of processor time.", int(lim.CPU/time.Second))}
	}
	return &Error{fmt.Sprintf("the reader failed (exit status %d).", ee.ExitCode())}
}

// Clean makes extracted text safe to store and show: valid UTF-8, no NUL or other
// control characters but tab and line breaks, lines without trailing spaces.
func Clean(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t':
			return r
		case r == '\r':
			return '\n'
		case unicode.IsControl(r), r == utf8.RuneError:
			return -1
		}
		return r
	}, s)
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t")
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}

// Exit statuses of the child besides 0 (text on stdout).
const (
	exitUsage   = 2 // also what the Go runtime uses for a fatal error
	exitRefused = 3 // stderr's first line is the reason, for the uploader
)

// Main runs the pdf-text subcommand: limit this process (the flags give the limits),
// read a PDF on stdin, write its text on stdout, exit 0; or exit 3 with the reason on
// stderr. A parser panic is recovered into a refusal; a fatal runtime error (memory,
// stack) ends the process with status 2, which the parent reads as such.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	mem, cpu, pages, maxText, err := parseArgs(args)
	if err != nil {
		fmt.Fprintln(stderr, "atrium pdf-text:", err)
		return exitUsage
	}
	// Limits first, before any byte of the PDF is read. The Go runtime reserves about
	// a gigabyte of address space at start (mostly never touched), so the limit on
	// address space is what this process has now plus mem.
	vm, err := vmSize()
	if err != nil {
		fmt.Fprintln(stderr, "atrium pdf-text:", err)
		return exitUsage
	}
	for _, l := range []struct {
		res int
		max uint64
	}{{syscall.RLIMIT_AS, uint64(vm + mem)}, {syscall.RLIMIT_CPU, uint64(cpu)}, {syscall.RLIMIT_FSIZE, 0}} {
		if err := syscall.Setrlimit(l.res, &syscall.Rlimit{Cur: l.max, Max: l.max}); err != nil {
			fmt.Fprintln(stderr, "atrium pdf-text: setrlimit:", err)
			return exitUsage
		}
	}
	debug.SetMemoryLimit(mem / 2) // collect hard before the address space runs out
	debug.SetMaxStack(64 << 20)   // deep nesting ends as "stack overflow", not as memory
	if _, err := sandbox.DenyAll(); err != nil {
		fmt.Fprintln(stderr, "atrium pdf-text: landlock:", err)
		return exitUsage
	}
	data, err := io.ReadAll(stdin)
	if err != nil {
		fmt.Fprintln(stderr, "atrium pdf-text: read:", err)
		return exitUsage
	}
	if err := extract(data, pages, maxText, stdout); err != nil {
		fmt.Fprintln(stderr, err.Error())
		return exitRefused
	}
	return 0
}

// vmSize is this process's address space now (VmSize in /proc/self/status).
func vmSize() (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmSize:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmSize in /proc/self/status")
}

func parseArgs(args []string) (mem int64, cpu, pages, maxText int, err error) {
	vals := map[string]int64{}
	for i := 0; i+1 < len(args); i += 2 {
		n, perr := strconv.ParseInt(args[i+1], 10, 64)
		if perr != nil || n <= 0 {
			return 0, 0, 0, 0, fmt.Errorf("bad value %q for %s", args[i+1], args[i])
		}
		vals[strings.TrimPrefix(args[i], "--")] = n
	}
	for _, k := range []string{"mem", "cpu", "pages", "text"} {
		if vals[k] == 0 {
			return 0, 0, 0, 0, fmt.Errorf("missing --%s (usage: pdf-text --mem BYTES --cpu SECONDS --pages N --text BYTES)", k)
		}
	}
	return vals["mem"], int(vals["cpu"]), int(vals["pages"]), int(vals["text"]), nil
}

// extract writes the text of the PDF in data to w, page by page, refusing more than
// maxPages pages or maxText bytes. Errors are reasons for the uploader; a panic in
// the parser is one of them.
func extract(data []byte, maxPages, maxText int, w io.Writer) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("it is damaged or not a PDF this reader understands (%s).", short(fmt.Sprint(r)))
		}
	}()
	r, err := pdf.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		if strings.Contains(err.Error(), "encrypt") || strings.Contains(err.Error(), "password") {
			return errors.New("it is encrypted or password-protected.")
		}
		return fmt.Errorf("it is damaged or not a PDF (%s).", short(err.Error()))
	}
	n := r.NumPage()
	switch {
	case n <= 0:
		return errors.New("it has no pages.")
	case n > maxPages:
		return fmt.Errorf("it has %d pages; at most %d can be read. Attach a part of it.", n, maxPages)
	}
	written := 0
	for i := 1; i <= n; i++ {
		p := r.Page(i)
		if p.V.IsNull() {
			continue
		}
		text, err := p.GetPlainText(nil) // fonts are a page's resources: parsed per page
		if err != nil {
			return fmt.Errorf("page %d is damaged (%s).", i, short(err.Error()))
		}
		if written += len(text) + 1; written > maxText {
			return fmt.Errorf("it has more than %s of text (the limit for an attached file). Attach a part of it.", mib(int64(maxText)))
		}
		if _, err := io.WriteString(w, text+"\n"); err != nil {
			return fmt.Errorf("write: %w", err)
		}
	}
	return nil
}

// short keeps an error's text readable in a message: one line, at most 120 bytes.
func short(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 120 {
		cut := 120
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

func mib(n int64) string {
	switch {
	case n%(1<<10) != 0:
		return fmt.Sprintf("%d bytes", n)
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d KiB", n>>10)
}

// capped keeps the first max bytes written to it and drops the rest.
type capped struct {
	bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.Len(); room > 0 {
		c.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
