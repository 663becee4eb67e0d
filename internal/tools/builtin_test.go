package tools_test

import (
	"context"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"atrium/internal/llm"
	"atrium/internal/store"
	"atrium/internal/store/storetest"
	"atrium/internal/tools"
)

func TestCalculator(t *testing.T) {
	cases := []struct {
		expr string
		want float64
	}{
		{"1 + 2 * 3", 7},
		{"(1 + 2) * 3", 9},
		{"10 - 4 - 3", 3},
		{"2 * 3 / 4", 1.5},
		{"100 / 10 / 5", 2},
		{"7 % 3", 1},
		{"-7 % 3", -1},
		{"2 ^ 3 ^ 2", 512}, // right-associative
		{"(2 ^ 3) ^ 2", 64},
		{"-2 ^ 2", -4}, // unary minus binds looser than ^
		{"(-2) ^ 2", 4},
		{"2 ^ -1", 0.5},
		{"--3", 3},
		{"-(2 + 3)", -5},
		{"+4", 4},
		{"3 * -2", -6},
		{"1.5e3 + .5", 1500.5},
		{"2E-2", 0.02},
		{"2 * pi", 2 * math.Pi},
		{"E", math.E},
		{"sqrt(16) + abs(-3)", 7},
		{"round(2.5) + floor(2.7) + ceil(2.1)", 3 + 2 + 3},
		{"min(3, 1, 2) + max(4, 9)", 10},
		{"log(1000)", 3},
		{"ln(e)", 1},
		{"exp(0)", 1},
		{"sin(0) + cos(0) + tan(0)", 1},
		{"SQRT(9)", 3},
		{"max(1, min(5, 2 ^ 2))", 4},
		{"  12.5 *\t(3 + 4) / 2 ", 43.75},
		{strings.Repeat("(", 100) + "1" + strings.Repeat(")", 100), 1},
	}
	for _, tc := range cases {
		t.Run(tc.expr, func(t *testing.T) {
			got, err := tools.Evaluate(tc.expr)
			if err != nil || math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("= %v, %v; want %v", got, err, tc.want)
			}
		})
	}

	errCases := []struct{ expr, detail string }{
		{"1 / 0", "division by zero"},
		{"1 / (2 - 2)", "division by zero"},
		{"5 % 0", "modulo by zero"},
		{"0 ^ -1", "division by zero (0 to a negative power)"},
		{"sqrt(-1)", "sqrt of a negative number (-1)"},
		{"(-8) ^ 0.5", "-8^0.5 is not a real number"},
		{"log(0)", "log of a number that is not positive (0)"},
		{"ln(-1)", "ln of a number that is not positive (-1)"},
		{"exp(1000)", "exp(1000) is not a finite number"},
		{"10 ^ 400", "the result of 10^400 is too large"},
		{"1e308 * 10", "the result is not a finite number"},
		{"1e999", "the number 1e999 is too large"},
		{"foo + 1", `unknown name "foo"; known are constants pi, e; functions sqrt, abs, round, floor, ceil, min, max, log, ln, exp, sin, cos, tan`},
		{"os.exit(1)", `unknown name "os"; known are constants pi, e; functions sqrt, abs, round, floor, ceil, min, max, log, ln, exp, sin, cos, tan`},
		{"sqrt 4", "the function sqrt needs parentheses, as in sqrt(2)"},
		{"sqrt(1, 2)", "sqrt takes 1 argument, got 2"},
		{"max()", "max takes at least 1 argument, got 0"},
		{"", "the expression is empty"},
		{"1 +", "the expression ends too early"},
		{"(1 + 2", "missing closing parenthesis"},
		{"1 + 2)", "unexpected ')' at position 6"},
		{"2 3", "unexpected '3' at position 3"},
		{"1 + $", "unexpected '$' at position 5"},
		{"1..2", `"1..2" is not a number`},
		{"2 × 3", "unexpected '×' at position 3"},
		{strings.Repeat("1+", 250) + "1", "the expression is 501 characters long; the limit is 500"},
		{strings.Repeat("(", 101) + "1" + strings.Repeat(")", 101), "the expression is nested more than 100 levels deep"},
		{strings.Repeat("-", 101) + "1", "the expression is nested more than 100 levels deep"},
	}
	for _, tc := range errCases {
		t.Run("error "+tc.expr, func(t *testing.T) {
			v, err := tools.Evaluate(tc.expr)
			te, ok := err.(*tools.Error)
			if !ok || te.Detail != tc.detail {
				t.Errorf("= %v, %v; want *tools.Error %q", v, err, tc.detail)
			}
		})
	}
}

func builtins(t *testing.T, now func() time.Time, tasks tools.TaskStore) *tools.Registry {
	t.Helper()
	r := tools.NewRegistry(nil, nil)
	if err := tools.RegisterBuiltins(r, now, tasks); err != nil {
		t.Fatal(err)
	}
	return r
}

func call(t *testing.T, r *tools.Registry, session string, owner int64, name, args string) tools.Result {
	t.Helper()
	return r.Dispatch(context.Background(), session, owner, llm.ToolCall{ID: "c", Name: name, Arguments: args})
}

func jsonEqual(t *testing.T, got, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("got %q: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want %q: %v", want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestCalculatorTool(t *testing.T) {
	r := builtins(t, nil, nil)
	jsonEqual(t, call(t, r, "s", 1, "calculator", `{"expression":"0.1 + 0.2"}`).Content, `{"expression":"0.1 + 0.2","result":0.3}`)
	jsonEqual(t, call(t, r, "s", 1, "calculator", `{"expression":"2^10"}`).Content, `{"expression":"2^10","result":1024}`)
	jsonEqual(t, call(t, r, "s", 1, "calculator", `{"expression":"1/0"}`).Content, `{"error":"execution_failed","detail":"division by zero"}`)
	jsonEqual(t, call(t, r, "s", 1, "calculator", `{}`).Content, `{"error":"invalid_arguments","detail":"expression: is required"}`)
}

func TestDatetime(t *testing.T) {
	clock := func() time.Time { return time.Date(2026, 11, 29, 21, 0, 0, 0, time.UTC) }
	r := builtins(t, clock, nil)
	cases := []struct{ args, want string }{
		{`{"timezone":"Europe/Berlin"}`, `{"iso":"2026-11-29T22:00:00+01:00","date":"2026-11-29","time":"22:00:00","weekday":"Sunday",
			"timezone":"Europe/Berlin","utc_offset":"+01:00","unix":1795986000}`},
		{`{}`, `{"iso":"2026-11-29T21:00:00Z","date":"2026-11-29","time":"21:00:00","weekday":"Sunday",
			"timezone":"UTC","utc_offset":"+00:00","unix":1795986000}`},
		{`{"timezone":"Asia/Kolkata"}`, `{"iso":"2026-11-30T02:30:00+05:30","date":"2026-11-30","time":"02:30:00","weekday":"Monday",
			"timezone":"Asia/Kolkata","utc_offset":"+05:30","unix":1795986000}`},
		{`{"timezone":"America/Los_Angeles"}`, `{"iso":"2026-11-29T13:00:00-08:00","date":"2026-11-29","time":"13:00:00","weekday":"Sunday",
			"timezone":"America/Los_Angeles","utc_offset":"-08:00","unix":1795986000}`},
		{`{"timezone":"Mars/Olympus"}`, `{"error":"execution_failed","detail":"unknown time zone \"Mars/Olympus\"; use an IANA name such as \"Europe/Berlin\", \"America/New_York\" or \"UTC\""}`},
		{`{"timezone":"Local"}`, `{"error":"execution_failed","detail":"unknown time zone \"Local\"; use an IANA name such as \"Europe/Berlin\", \"America/New_York\" or \"UTC\""}`},
		{`{"timezone":"../../etc/passwd"}`, `{"error":"execution_failed","detail":"unknown time zone \"../../etc/passwd\"; use an IANA name such as \"Europe/Berlin\", \"America/New_York\" or \"UTC\""}`},
		{`{"timezone":5}`, `{"error":"invalid_arguments","detail":"timezone: expected string, got number"}`},
	}
	for _, tc := range cases {
		t.Run(tc.args, func(t *testing.T) {
			jsonEqual(t, call(t, r, "s", 1, "datetime", tc.args).Content, tc.want)
		})
	}
}

func TestTaskTools(t *testing.T) {
	db := storetest.Open(t)
	ctx := context.Background()
	ann := store.User{Username: "ann", PasswordHash: "h", Role: store.RoleUser}
	bob := store.User{Username: "bob", PasswordHash: "h", Role: store.RoleUser}
	for _, u := range []*store.User{&ann, &bob} {
		if err := db.CreateUser(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	sess := store.Session{ID: "s-ann", OwnerID: ann.ID}
	if err := db.CreateSession(ctx, &sess); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	r := builtins(t, func() time.Time { return now }, db)

	steps := []struct {
		name, tool, args string
		owner            int64
		want             string
	}{
		{"empty state", "task_get", ``, ann.ID, `{"goal":"","stage":"","params":{}}`},
		{"set goal and params", "task_update", `{"goal":"Plan a trip to Lyon","stage":"choosing dates","params":{"city":"Lyon","nights":3}}`, ann.ID,
			`{"goal":"Plan a trip to Lyon","stage":"choosing dates","params":{"city":"Lyon","nights":3},"updated_at":"2026-03-01T10:00:00Z"}`},
		{"stage only keeps the rest", "task_update", `{"stage":"booking"}`, ann.ID,
			`{"goal":"Plan a trip to Lyon","stage":"booking","params":{"city":"Lyon","nights":3},"updated_at":"2026-03-01T10:00:00Z"}`},
		{"get", "task_get", `{}`, ann.ID,
			`{"goal":"Plan a trip to Lyon","stage":"booking","params":{"city":"Lyon","nights":3},"updated_at":"2026-03-01T10:00:00Z"}`},
		{"params replaced", "task_update", `{"params":{"hotel":"Le Royal"}}`, ann.ID,
			`{"goal":"Plan a trip to Lyon","stage":"booking","params":{"hotel":"Le Royal"},"updated_at":"2026-03-01T10:00:00Z"}`},
		{"goal too long", "task_update", `{"goal":"` + strings.Repeat("g", 501) + `"}`, ann.ID,
			`{"error":"invalid_arguments","detail":"goal: must be at most 500 characters, got 501"}`},
		{"params too big", "task_update", `{"params":{"blob":"` + strings.Repeat("x", 8200) + `"}}`, ann.ID,
			`{"error":"execution_failed","detail":"params: must be at most 8192 bytes as JSON, got 8211"}`},
		{"params cleared", "task_update", `{"params":null}`, ann.ID,
			`{"goal":"Plan a trip to Lyon","stage":"booking","params":{},"updated_at":"2026-03-01T10:00:00Z"}`},
		{"someone else's session", "task_get", `{}`, bob.ID,
			`{"error":"execution_failed","detail":"this conversation no longer exists"}`},
		{"someone else's update", "task_update", `{"goal":"x"}`, bob.ID,
			`{"error":"execution_failed","detail":"this conversation no longer exists"}`},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			jsonEqual(t, call(t, r, sess.ID, st.owner, st.tool, st.args).Content, st.want)
		})
	}

	// The state is in the session row, and the web panel's parser agrees.
	got, err := db.SessionForOwner(ctx, sess.ID, ann.ID)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := tools.ParseTaskState(got.State)
	if err != nil {
		t.Fatal(err)
	}
	want := tools.TaskState{Goal: "Plan a trip to Lyon", Stage: "booking", UpdatedAt: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)}
	if !reflect.DeepEqual(ts, want) {
		t.Errorf("stored state %+v, want %+v", ts, want)
	}
	jsonEqual(t, string(ts.JSON()), string(got.State))
}

func TestTaskStateValidation(t *testing.T) {
	cases := []struct{ name, state, detail string }{
		{"empty", ``, ""},
		{"empty object", `{}`, ""},
		{"full", `{"goal":"g","stage":"s","params":{"a":[1,2]},"updated_at":"2026-03-01T10:00:00+01:00"}`, ""},
		{"null params", `{"params":null}`, ""},
		{"goal too long", `{"goal":"` + strings.Repeat("é", 501) + `"}`, "goal: must be at most 500 characters, got 501"},
		{"stage too long", `{"stage":"` + strings.Repeat("s", 201) + `"}`, "stage: must be at most 200 characters, got 201"},
		{"params not object", `{"params":[1]}`, "params: expected null or object, got array"},
		{"params too big", `{"params":{"b":"` + strings.Repeat("x", 8190) + `"}}`, "params: must be at most 8192 bytes as JSON, got 8198"},
		{"unknown field", `{"goal":"g","owner":1}`, "owner: is not an allowed property"},
		{"bad time", `{"updated_at":"yesterday"}`, "updated_at: must be a time in RFC 3339 format, like 2026-11-29T21:00:00Z"},
		{"not JSON", `{"goal":`, "the task state is not valid JSON: unexpected end of input"},
		{"not an object", `"goal"`, "state: expected object, got string"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tools.ValidateTaskState([]byte(tc.state))
			if tc.detail == "" {
				if err != nil {
					t.Errorf("refused: %v", err)
				}
				return
			}
			te, ok := err.(*tools.Error)
			if !ok || te.Detail != tc.detail {
				t.Errorf("got %v, want *tools.Error %q", err, tc.detail)
			}
		})
	}

	s, err := tools.ParseTaskState([]byte(`{"goal":"g","params":{"n":12345678901234567890},"updated_at":"2026-03-01T10:00:00+01:00"}`))
	if err != nil {
		t.Fatal(err)
	}
	if !s.UpdatedAt.Equal(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)) {
		t.Errorf("UpdatedAt %v", s.UpdatedAt)
	}
	// Big integers survive a round trip; the time is stored in UTC.
	jsonEqual(t, string(s.JSON()), `{"goal":"g","stage":"","params":{"n":12345678901234567890},"updated_at":"2026-03-01T09:00:00Z"}`)
	if !strings.Contains(string(s.JSON()), "12345678901234567890") {
		t.Errorf("big integer lost: %s", s.JSON())
	}
}
