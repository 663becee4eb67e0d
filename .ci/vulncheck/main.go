// Command vulncheck reads govulncheck's JSON output (-format json) on stdin and fails
// when the code reaches a known vulnerability that is not accepted in .ci/vuln-accepted.
// An accepted one is printed with its reason on every run, and fails again as soon as a
// fixed version exists (then upgrade instead). govulncheck alone cannot accept a finding
// that has no fix, so without this CI could never pass while one exists.
//
//	govulncheck -db file://DIR -format json ./... | go run ./.ci/vulncheck .ci/vuln-accepted
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

type message struct {
	OSV     *struct{ ID, Summary string } `json:"osv"`
	Finding *struct {
		OSV          string `json:"osv"`
		FixedVersion string `json:"fixed_version"`
		Trace        []struct {
			Module, Version, Package, Function, Receiver string
		} `json:"trace"`
	} `json:"finding"`
}

type reached struct {
	fixed   string
	module  string
	version string
	example string
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: govulncheck -format json ./... | vulncheck ACCEPTED_FILE")
		os.Exit(2)
	}
	accepted, err := readAccepted(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "vulncheck:", err)
		os.Exit(2)
	}
	found, summaries, err := readFindings(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vulncheck: reading govulncheck output:", err)
		os.Exit(2)
	}
	ids := make([]string, 0, len(found))
	for id := range found {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	failed := 0
	for _, id := range ids {
		f := found[id]
		where := fmt.Sprintf("%s %s@%s (%s), e.g. %s", id, f.module, f.version, summaries[id], f.example)
		reason, ok := accepted[id]
		switch {
		case f.fixed != "":
			failed++
			fmt.Printf("FAIL  %s: fixed in %s, upgrade\n", where, f.fixed)
		case !ok:
			failed++
			fmt.Printf("FAIL  %s: no fixed version; fix the code or accept it in %s with a reason\n", where, os.Args[1])
		default:
			fmt.Printf("accepted (no fix exists)  %s: %s\n", where, reason)
		}
	}
	for id := range accepted {
		if _, ok := found[id]; !ok {
			fmt.Printf("note  %s is accepted in %s but no longer reached: remove it\n", id, os.Args[1])
		}
	}
	fmt.Printf("vulncheck: %d reachable vulnerabilities, %d not accepted\n", len(ids), failed)
	if failed > 0 {
		os.Exit(1)
	}
}

// readFindings keeps the symbol-level findings (a trace that ends in a function: the code
// calls it), by OSV id.
func readFindings(r io.Reader) (map[string]reached, map[string]string, error) {
	found, summaries := map[string]reached{}, map[string]string{}
	dec := json.NewDecoder(r)
	for {
		var m message
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return found, summaries, nil
		} else if err != nil {
			return nil, nil, err
		}
		if m.OSV != nil {
			summaries[m.OSV.ID] = m.OSV.Summary
		}
		f := m.Finding
		if f == nil || len(f.Trace) == 0 || f.Trace[0].Function == "" {
			continue
		}
		if _, seen := found[f.OSV]; seen {
			continue
		}
		t := f.Trace[0]
		fn := t.Function
		if t.Receiver != "" {
			fn = strings.TrimPrefix(t.Receiver, "*") + "." + fn
		}
		found[f.OSV] = reached{fixed: f.FixedVersion, module: t.Module, version: t.Version, example: t.Package + "." + fn}
	}
}

// readAccepted reads "ID reason…" lines; # starts a comment. A line without a reason is
// an error: an accepted vulnerability must say why.
func readAccepted(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	acc := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, reason, _ := strings.Cut(line, " ")
		if strings.TrimSpace(reason) == "" {
			return nil, fmt.Errorf("%s:%d: %s has no reason", path, n, id)
		}
		acc[id] = strings.TrimSpace(reason)
	}
	return acc, sc.Err()
}
