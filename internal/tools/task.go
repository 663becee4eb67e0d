package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"atrium/internal/errs"
	"atrium/internal/store"
)

// TaskStore is what the task tools need of the store (*store.DB has it).
type TaskStore interface {
	SessionForOwner(ctx context.Context, id string, owner int64) (store.Session, error)
	SetSessionState(ctx context.Context, id string, owner int64, state []byte) error
}

// Task state limits.
const (
	MaxGoalLen     = 500  // characters
	MaxStageLen    = 200  // characters
	MaxParamsBytes = 8192 // params serialized as JSON
)

// TaskState is a session's working memory, stored as the session's State:
// {"goal":…,"stage":…,"params":{…},"updated_at":RFC 3339}. The goal and stage go
// into the model's pinned context; params stay on the server (task_get reads them).
type TaskState struct {
	Goal      string
	Stage     string
	Params    map[string]any // numbers are json.Number after ParseTaskState
	UpdatedAt time.Time
}

type taskStateJSON struct {
	Goal      string         `json:"goal"`
	Stage     string         `json:"stage"`
	Params    map[string]any `json:"params"`
	UpdatedAt string         `json:"updated_at,omitempty"`
}

// JSON encodes the state as stored: params is {} when empty, updated_at is UTC
// and omitted when zero.
func (s TaskState) JSON() []byte {
	j := taskStateJSON{Goal: s.Goal, Stage: s.Stage, Params: s.Params}
	if j.Params == nil {
		j.Params = map[string]any{}
	}
	if !s.UpdatedAt.IsZero() {
		j.UpdatedAt = s.UpdatedAt.UTC().Format(time.RFC3339)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(j); err != nil {
		// Only values ParseTaskState or JSON decoding produced belong in Params.
		panic(fmt.Sprintf("tools: encode task state: %v", err))
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

const taskStateSchema = `{
	"type": "object",
	"properties": {
		"goal": {"type": "string", "maxLength": 500},
		"stage": {"type": "string", "maxLength": 200},
		"params": {"type": ["object", "null"]},
		"updated_at": {"type": "string"}
	},
	"additionalProperties": false
}`

var compiledTaskState = sync.OnceValue(func() *jsonschema.Schema {
	sch, err := compileSchema("task_state", []byte(taskStateSchema))
	if err != nil {
		panic(err)
	}
	return sch
})

// ValidateTaskState checks a task state document (an empty one counts as {}):
// the schema (goal ≤ 500 characters, stage ≤ 200, params an object, no other
// fields), params ≤ 8 KB as JSON and updated_at in RFC 3339. A failure is an
// *Error whose Detail names the field, e.g. "goal: must be at most 500
// characters, got 612"; it is safe to show to the user and the model.
func ValidateTaskState(b []byte) error {
	_, err := parseTaskState(b)
	return err
}

// ParseTaskState validates b (see ValidateTaskState) and decodes it.
func ParseTaskState(b []byte) (TaskState, error) {
	return parseTaskState(b)
}

func parseTaskState(b []byte) (TaskState, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return TaskState{}, nil
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return TaskState{}, Errorf("the task state is not valid JSON: %s", jsonProblem(err))
	}
	if err := compiledTaskState().Validate(inst); err != nil {
		return TaskState{}, &Error{Detail: validationDetail(err, "state")}
	}
	obj := inst.(map[string]any)
	var s TaskState
	s.Goal, _ = obj["goal"].(string)
	s.Stage, _ = obj["stage"].(string)
	if p, ok := obj["params"].(map[string]any); ok {
		if err := checkParams(p); err != nil {
			return TaskState{}, err
		}
		if len(p) > 0 {
			s.Params = p
		}
	}
	if at, ok := obj["updated_at"].(string); ok && at != "" {
		t, err := time.Parse(time.RFC3339, at)
		if err != nil {
			return TaskState{}, Errorf("updated_at: must be a time in RFC 3339 format, like 2026-11-29T21:00:00Z")
		}
		s.UpdatedAt = t
	}
	return s, nil
}

func checkParams(p map[string]any) error {
	b, err := json.Marshal(p)
	if err != nil {
		return Errorf("params: cannot be encoded as JSON")
	}
	if len(b) > MaxParamsBytes {
		return Errorf("params: must be at most %d bytes as JSON, got %d", MaxParamsBytes, len(b))
	}
	return nil
}

func taskUpdateTool(now func() time.Time, tasks TaskStore) Tool {
	return Tool{
		Name: "task_update",
		Description: "When to use: the user states or changes what they want to achieve, a step of a multi-step task is done, " +
			"or you learn a value you will need in later turns. " +
			"What it does: updates this conversation's task state (goal, stage, params), which is kept across turns and restarts; " +
			"the goal and stage are shown to you at the start of every turn, params only through task_get. Returns the new state. " +
			"Parameters: give only the fields that change. goal (at most 500 characters) is the user's objective; " +
			"stage (at most 200 characters) says where the work stands now; params is an object of values to remember " +
			"(it replaces the previous params; null clears them; at most 8 KB).",
		Schema: json.RawMessage(`{
	"type": "object",
	"properties": {
		"goal": {"type": "string", "maxLength": 500, "description": "The user's objective in one or two sentences."},
		"stage": {"type": "string", "maxLength": 200, "description": "Where the work stands now, e.g. \"comparing flights\"."},
		"params": {"type": ["object", "null"], "description": "Values to remember, e.g. {\"city\": \"Lyon\"}; replaces the previous params; null clears them."}
	},
	"additionalProperties": false
}`),
		Execute: func(ctx context.Context, call Call) (string, error) {
			var args map[string]json.RawMessage
			if err := json.Unmarshal(call.Args, &args); err != nil {
				return "", Errorf("arguments must be a JSON object")
			}
			sess, err := tasks.SessionForOwner(ctx, call.SessionID, call.OwnerID)
			if err != nil {
				return "", sessionError(err)
			}
			// A stored state that no longer validates is replaced rather than
			// blocking every update.
			st, _ := ParseTaskState(sess.State)
			if raw, ok := args["goal"]; ok {
				json.Unmarshal(raw, &st.Goal)
			}
			if raw, ok := args["stage"]; ok {
				json.Unmarshal(raw, &st.Stage)
			}
			if raw, ok := args["params"]; ok {
				st.Params = nil
				d := json.NewDecoder(bytes.NewReader(raw))
				d.UseNumber()
				d.Decode(&st.Params) // validated as object or null
			}
			st.UpdatedAt = now().UTC().Truncate(time.Second)
			b := st.JSON()
			if err := ValidateTaskState(b); err != nil {
				return "", err
			}
			if err := tasks.SetSessionState(ctx, call.SessionID, call.OwnerID, b); err != nil {
				return "", sessionError(err)
			}
			return string(b), nil
		},
	}
}

func taskGetTool(tasks TaskStore) Tool {
	return Tool{
		Name: "task_get",
		Description: "When to use: you need a value saved earlier with task_update, or want to check the current goal and stage. " +
			"What it does: returns this conversation's task state as {goal, stage, params, updated_at}. " +
			"Parameters: none.",
		Schema: json.RawMessage(`{"type": "object", "properties": {}, "additionalProperties": false}`),
		Execute: func(ctx context.Context, call Call) (string, error) {
			sess, err := tasks.SessionForOwner(ctx, call.SessionID, call.OwnerID)
			if err != nil {
				return "", sessionError(err)
			}
			st, err := ParseTaskState(sess.State)
			if err != nil {
				return "", Errorf("the saved task state is invalid (%s); set it again with task_update", err)
			}
			return string(st.JSON()), nil
		},
	}
}

// sessionError keeps store errors away from the model except "not found".
func sessionError(err error) error {
	if errs.Is(err, errs.NotFound) {
		return Errorf("this conversation no longer exists")
	}
	if errs.Is(err, errs.Invalid) {
		return Errorf("the task state was refused: %s", strings.TrimSuffix(errs.Message(err), "."))
	}
	return err
}
