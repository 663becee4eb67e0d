package tools

import (
	"context"
	"encoding/json"
	"strconv"
	"time"
	_ "time/tzdata" // the zone database, for containers without /usr/share/zoneinfo
)

// RegisterBuiltins registers the built-in tools: datetime and calculator, and,
// when tasks is not nil, task_update and task_get. now is the clock (nil:
// time.Now). It fails only if a name is already taken.
func RegisterBuiltins(r *Registry, now func() time.Time, tasks TaskStore) error {
	if now == nil {
		now = time.Now
	}
	list := []Tool{datetimeTool(now), calculatorTool()}
	if tasks != nil {
		list = append(list, taskUpdateTool(now, tasks), taskGetTool(tasks))
	}
	for _, t := range list {
		if err := r.Register(t); err != nil {
			return err
		}
	}
	return nil
}

func datetimeTool(now func() time.Time) Tool {
	return Tool{
		Name: "datetime",
		Description: "When to use: the answer depends on the current date, time or weekday (\"today\", \"now\", \"in 3 days\", " +
			"\"what time is it in Tokyo\"). What it does: returns the current date and time in a time zone, with the weekday, " +
			"the UTC offset and Unix time. Parameters: timezone (optional) is an IANA name such as \"Europe/Berlin\" or " +
			"\"America/New_York\"; omit it for UTC.",
		Schema: json.RawMessage(`{
	"type": "object",
	"properties": {
		"timezone": {"type": "string", "description": "IANA time zone name, e.g. \"Europe/Berlin\"; default \"UTC\"."}
	},
	"additionalProperties": false
}`),
		Execute: func(ctx context.Context, call Call) (string, error) {
			var args struct {
				Timezone string `json:"timezone"`
			}
			if err := json.Unmarshal(call.Args, &args); err != nil {
				return "", Errorf("arguments must be a JSON object")
			}
			loc, err := loadZone(args.Timezone)
			if err != nil {
				return "", err
			}
			t := now().In(loc)
			out, err := json.Marshal(struct {
				ISO       string `json:"iso"`
				Date      string `json:"date"`
				Time      string `json:"time"`
				Weekday   string `json:"weekday"`
				Timezone  string `json:"timezone"`
				UTCOffset string `json:"utc_offset"`
				Unix      int64  `json:"unix"`
			}{
				ISO:       t.Format(time.RFC3339),
				Date:      t.Format(time.DateOnly),
				Time:      t.Format(time.TimeOnly),
				Weekday:   t.Weekday().String(),
				Timezone:  loc.String(),
				UTCOffset: t.Format("-07:00"),
				Unix:      t.Unix(),
			})
			return string(out), err
		},
	}
}

// loadZone loads an IANA zone ("" is UTC). "Local" is refused: it is not a
// place, and it would tell the model the server's zone.
func loadZone(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	bad := Errorf("unknown time zone %q; use an IANA name such as \"Europe/Berlin\", \"America/New_York\" or \"UTC\"", capText(name, 64))
	if len(name) > 64 || name == "Local" {
		return nil, bad
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '/' || c == '_' || c == '-' || c == '+') {
			return nil, bad
		}
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, bad
	}
	return loc, nil
}

func calculatorTool() Tool {
	return Tool{
		Name: "calculator",
		Description: "When to use: any arithmetic your answer depends on; do not compute in your head. " +
			"What it does: evaluates one arithmetic expression and returns the number (no code is run). " +
			"Parameters: expression uses numbers, + - * / % and ^ (power), parentheses, the constants pi and e, " +
			"and the functions sqrt abs round floor ceil min max log (base 10) ln exp sin cos tan (radians); " +
			"for example \"(2 + 3)^2 * sqrt(16)\". At most 500 characters.",
		Schema: json.RawMessage(`{
	"type": "object",
	"properties": {
		"expression": {"type": "string", "description": "The arithmetic expression, e.g. \"12.5 * (3 + 4) / 2\"."}
	},
	"required": ["expression"],
	"additionalProperties": false
}`),
		Execute: func(ctx context.Context, call Call) (string, error) {
			var args struct {
				Expression string `json:"expression"`
			}
			if err := json.Unmarshal(call.Args, &args); err != nil {
				return "", Errorf("arguments must be a JSON object")
			}
			v, err := Evaluate(args.Expression)
			if err != nil {
				return "", err
			}
			// 15 significant digits hide binary noise: 0.1+0.2 gives 0.3.
			v, _ = strconv.ParseFloat(strconv.FormatFloat(v, 'g', 15, 64), 64)
			out, err := json.Marshal(struct {
				Expression string  `json:"expression"`
				Result     float64 `json:"result"`
			}{args.Expression, v})
			return string(out), err
		},
	}
}
