package mcp_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"atrium/internal/testkit"
)

// The official MCP conformance suite (@modelcontextprotocol/conformance, pinned in
// testdata/conformance with the Node 22 it needs) runs its client scenarios against
// Atrium's supervisor through testdata/conformanceclient. Every failed check must be
// listed in testdata/conformance/expected-failures.txt with a reason; anything else
// failing fails the test, and a listed failure that now passes is reported so that the
// list is kept tight. ATRIUM_CONFORMANCE_PLAIN=1 runs a bare mcp-go client instead, for
// comparison (not checked against the list). ATRIUM_CONFORMANCE_SCENARIOS narrows the
// run to a comma-separated list.

var conformanceDir = filepath.Join("..", "..", "testdata", "conformance")

// conformanceTools returns node 22 and the suite's CLI, skipping (or failing under
// E2E_REQUIRED=1) when they are not installed.
func conformanceTools(t *testing.T) (node, cli string) {
	t.Helper()
	node, _ = filepath.Abs(filepath.Join(conformanceDir, "node_modules", "node", "bin", "node"))
	cli, _ = filepath.Abs(filepath.Join(conformanceDir, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js"))
	out, err := exec.Command(node, "--version").Output()
	_, serr := os.Stat(cli)
	if err != nil || serr != nil || !strings.HasPrefix(string(out), "v22.") {
		msg := "the conformance suite or Node 22 is missing (run: npm ci --prefix testdata/conformance)"
		if os.Getenv("E2E_REQUIRED") == "1" {
			t.Fatal(msg)
		}
		testkit.Skip(t, msg)
	}
	return node, cli
}

// expectedFailures reads the list: "<scenario> <check id or *> <reason>" per line.
func expectedFailures(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join(conformanceDir, "expected-failures.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 3 {
			t.Fatalf("expected-failures.txt:%d: want <scenario> <check id or *> <reason>", n)
		}
		out[fields[0]+" "+fields[1]] = strings.Join(fields[2:], " ")
	}
	return out
}

// scenarioResult is what one client scenario's checks came to.
type scenarioResult struct {
	passed, failed []string // check ids, each once
}

var scenarioLine = regexp.MustCompile(`^\s+- (\S+) \[`)

func TestConformanceClientScenarios(t *testing.T) {
	node, cli := conformanceTools(t)
	if testing.Short() {
		t.Skip("the conformance run takes minutes")
	}
	client := filepath.Join(t.TempDir(), "conformanceclient")
	if out, err := exec.Command("go", "build", "-o", client, "./testdata/conformanceclient").CombinedOutput(); err != nil {
		t.Fatalf("building the client: %v\n%s", err, out)
	}
	plain := os.Getenv("ATRIUM_CONFORMANCE_PLAIN") == "1"
	command := client
	if plain {
		command += " -plain"
	}

	list, err := exec.Command(node, cli, "list", "--client").Output()
	if err != nil {
		t.Fatalf("listing the scenarios: %v", err)
	}
	var scenarios []string
	for _, l := range strings.Split(string(list), "\n") {
		if m := scenarioLine.FindStringSubmatch(l); m != nil {
			scenarios = append(scenarios, m[1])
		}
	}
	if len(scenarios) < 20 {
		t.Fatalf("the suite lists %d client scenarios:\n%s", len(scenarios), list)
	}
	if only := os.Getenv("ATRIUM_CONFORMANCE_SCENARIOS"); only != "" {
		scenarios = strings.Split(only, ",")
	}

	out := t.TempDir()
	results := map[string]scenarioResult{}
	for _, sc := range scenarios {
		// One at a time: in parallel, a loaded machine turns slow starts into timeouts.
		cmd := exec.Command(node, cli, "client", "--command", command, "--scenario", sc, "--timeout", "40000", "-o", out)
		cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(node)+string(os.PathListSeparator)+os.Getenv("PATH"))
		log, _ := cmd.CombinedOutput() // exits 1 when a check fails: the checks say which
		res, err := readChecks(filepath.Join(out, sc))
		if err != nil {
			t.Errorf("%s: no results (%v); the suite said:\n%.3000s", sc, err, log)
			continue
		}
		results[sc] = res
	}

	var passed, failed int
	var unexpected, nowPass []string
	expected := expectedFailures(t)
	seen := map[string]bool{}
	for _, sc := range scenarios {
		res, ok := results[sc]
		if !ok {
			continue
		}
		passed += len(res.passed)
		failed += len(res.failed)
		for _, id := range res.failed {
			k := sc + " " + id
			seen[k], seen[sc+" *"] = true, true
			if _, ok := expected[k]; !ok {
				if _, ok := expected[sc+" *"]; !ok {
					unexpected = append(unexpected, k)
				}
			}
		}
	}
	for k := range expected {
		sc, _, _ := strings.Cut(k, " ")
		if _, ran := results[sc]; ran && !seen[k] {
			nowPass = append(nowPass, k)
		}
	}
	sort.Strings(unexpected)
	sort.Strings(nowPass)
	who := "Atrium's supervisor"
	if plain {
		who = "plain mcp-go"
	}
	t.Logf("%s: %d scenarios, %d checks passed, %d failed", who, len(results), passed, failed)
	for _, sc := range scenarios {
		if res, ok := results[sc]; ok {
			t.Logf("  %-45s %3d passed %3d failed %s", sc, len(res.passed), len(res.failed), strings.Join(res.failed, " "))
		}
	}
	if plain {
		return
	}
	for _, k := range nowPass {
		t.Logf("now passes, remove it from expected-failures.txt: %s", k)
	}
	for _, k := range unexpected {
		t.Errorf("unexpected failure (a regression, or list it in expected-failures.txt with why): %s", k)
	}
}

// readChecks reads the checks.json the suite wrote for scenario under dir (in a
// directory named after the scenario and a timestamp).
func readChecks(prefix string) (scenarioResult, error) {
	matches, _ := filepath.Glob(prefix + "-*/checks.json")
	if len(matches) == 0 {
		return scenarioResult{}, fmt.Errorf("no %s-*/checks.json", prefix)
	}
	sort.Strings(matches)
	b, err := os.ReadFile(matches[len(matches)-1])
	if err != nil {
		return scenarioResult{}, err
	}
	var checks []struct {
		ID, Status string
	}
	if err := json.Unmarshal(b, &checks); err != nil {
		return scenarioResult{}, err
	}
	var res scenarioResult
	for _, c := range checks {
		switch c.Status {
		case "SUCCESS":
			if !slices.Contains(res.passed, c.ID) {
				res.passed = append(res.passed, c.ID)
			}
		case "FAILURE", "WARNING":
			if !slices.Contains(res.failed, c.ID) {
				res.failed = append(res.failed, c.ID)
			}
		}
	}
	// A check that failed once counts as failed.
	res.passed = slices.DeleteFunc(res.passed, func(id string) bool { return slices.Contains(res.failed, id) })
	return res, nil
}
