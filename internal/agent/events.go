package agent

import (
	"time"

	"atrium/internal/contextwin"
	"atrium/internal/llm"
	"atrium/internal/memory"
	"atrium/internal/store"
	"atrium/internal/tools"
)

// EventKind says what happened.
type EventKind int

// Session events concern a chat rather than one run; their RunID is empty (except
// EventUserMessage, which carries the run it starts).
const (
	EventUserMessage EventKind = iota // Message: the committed user message
	EventQueued                       // Text: a message waiting for the current reply to end
	EventNotice                       // Text: something the user should know that is not a message
	EventTaskState                    // State: the session's task state changed
	EventTitle                        // Session: the model gave the chat its title
	// EventBranch: the branch on screen changed (an edit, a regenerate or retry, or a
	// flip between versions). Message is the user message the new run answers (RunID set),
	// or nil after a flip; Versions, after a regenerate, where its reply will stand among
	// the versions of the reply.
	EventBranch
)

// Run events, each with RunID and Seq (1, 2, … in the order they happened). A run
// starts with EventRunStarted (or, when no model could be resolved, with EventError),
// has one EventFinal when its reply is committed and ends with EventRunEnded, after any
// summary update that follows the reply.
const (
	EventRunStarted    EventKind = iota + 100 // Model: the resolved model
	EventContext                              // Step, Report: what went into the model's context
	EventToolsSelected                        // Step, Selection: which tools were offered
	EventModelRequest                         // Step, Request: the request as built, before it is sent
	EventText                                 // Text: a delta of the reply
	EventReasoning                            // Text: a delta of reasoning/thinking
	EventModelResponse                        // Step, Response, Wire (the bytes sent), Err, Duration; Request is its EventModelRequest's pointer, which pairs them when calls overlap
	EventAssistantStep                        // Message: a committed assistant message that called tools; a new reply follows
	EventToolStarted                          // ToolCall: a tool is running
	EventToolResult                           // ToolCall, Result, Message (the committed tool message)
	EventSummary                              // Summary: a rolling-summary update (after EventFinal)
	EventMemory                               // Memory: the long-term memory lookup for the user message; or MemoryWrite: memories saved or forgotten
	EventError                                // Err: what failed; Text: what the user is told
	EventFinal                                // Message: the committed final assistant message (complete, stopped or error)
	EventRunEnded                             // Totals: the run is over; nothing more follows
	EventToolProgress                         // ToolCall, Text (the call's key), Progress: a running tool reported progress
)

// String names the kind, for logs and the trace.
func (k EventKind) String() string {
	if n, ok := eventNames[k]; ok {
		return n
	}
	return "unknown"
}

var eventNames = map[EventKind]string{
	EventUserMessage: "user_message", EventQueued: "queued", EventNotice: "notice", EventTaskState: "task_state", EventTitle: "title", EventBranch: "branch",
	EventRunStarted: "run_started", EventContext: "context", EventToolsSelected: "tools_selected",
	EventModelRequest: "model_request", EventText: "text", EventReasoning: "reasoning",
	EventModelResponse: "model_response", EventAssistantStep: "assistant_step", EventToolStarted: "tool_started",
	EventToolResult: "tool_result", EventSummary: "summary", EventMemory: "memory", EventError: "error",
	EventFinal: "final", EventRunEnded: "run_ended", EventToolProgress: "tool_progress",
}

// Event is one step of a run, or of a session between runs. One ordered stream of
// them feeds every consumer (the websocket hub, the recorder, metrics): a consumer
// renders or stores what it needs and ignores the rest. Payload pointers are shared
// by all consumers and must be treated as read-only.
type Event struct {
	Kind      EventKind
	RunID     string // the run this event belongs to ("" for session events)
	Seq       int    // position in the run, from 1; 0 for session events
	SessionID string
	OwnerID   int64
	At        time.Time
	Step      int // the model step (1…MaxSteps) for per-step events

	Message     *store.Message
	Session     *store.Session  // EventTitle: the chat as it is now
	Versions    *store.Versions // EventBranch
	Text        string
	Model       string
	Request     *llm.Request
	Response    *llm.Response
	Wire        *llm.HTTPRequest // the model request as it went on the wire, when captured
	ToolCall    *llm.ToolCall
	Result      *tools.Result
	Report      *contextwin.Report
	Selection   *tools.Selection
	Summary     *SummaryUpdate
	Memory      *MemoryRecall
	MemoryWrite *MemoryWrite
	Totals      *RunTotals
	Progress    *tools.Progress
	State       []byte
	Err         error
	Duration    time.Duration // model call or summary duration
	FirstToken  time.Duration // EventModelResponse: from the request to the first text or reasoning delta (0: none came)
	// Purpose marks a model request/response that is not one of the reply's steps
	// (PurposeMemoryExtract); "" for the reply's own.
	Purpose string
}

// SummaryUpdate is one fold of older turns into the rolling summary.
type SummaryUpdate struct {
	FromSeq, ToSeq    int64 // the messages folded
	PreviousWatermark int64
	Summary           string // the new summary ("" when the fold failed)
	Tokens            int
}

// MemoryRecall is the long-term memory lookup for a run's user message: what was
// found and put into the pinned zone (ids and scores, never the texts).
type MemoryRecall struct {
	Hits        []MemoryHit // best first
	LexicalOnly bool        // the vector search failed (VectorErr) and only the lexical index answered
	VectorErr   error
	Err         error // the lookup failed altogether; the run went on without memories
}

// MemoryWrite is a change to the user's memories made by a run: an explicit request
// (Op "save" or "forget", IDs the memories saved or removed) or the extraction after
// the reply (Op "extract", IDs as "add:id", "update:id" or "delete:id"). Err is set
// when something failed or was refused.
//
// With "ask before saving", extraction's adds and updates are kept as Suggestions
// (IDs "suggest-add:id" or "suggest-update:id"); their texts are for the chat's chips
// only and must not be recorded. Dropped says which proposals were not written and why
// (not the user's words, already in memory), never their text.
type MemoryWrite struct {
	Op          string
	IDs         []string
	Err         error
	Suggestions []memory.Suggestion
	Dropped     []string
}

// MemoryHit is one recalled memory and why it ranked where it did.
type MemoryHit struct {
	ID, Kind                   string
	Score, Similarity, Lexical float64
}

// RunTotals close a run.
type RunTotals struct {
	Status       string // a store.Status* of the final message
	Error        string // what the user was told, if anything
	InputTokens  int
	OutputTokens int
	Steps        int
	StartedAt    time.Time
	// The memory hit rate's turn: MemoryLookup when the long-term memory was
	// searched for it (memory on, the lookup answered), MemoryUsed when at least
	// one memory it found was in the context the model was sent (not all cut by
	// the pinned zone's budget).
	MemoryLookup, MemoryUsed bool
}
