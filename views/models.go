// Package views holds Atrium's templ components. Components take the plain view
// models declared here, already filled by the web layer: views never touch the store,
// and assistant messages arrive as HTML that internal/markdown has sanitised.
//
// Edit the .templ files and run `go tool templ generate` from the repository root;
// the generated *_templ.go files are committed.
package views

import "time"

// Page is what every full page needs.
type Page struct {
	Title string
	CSRF  string // the token for hidden _csrf fields and the X-CSRF-Token header
	User  *User  // nil when nobody is logged in
	Flash string // a one-off message shown under the top bar
}

// User is the logged-in user.
type User struct {
	ID       int64
	Username string
	IsAdmin  bool
	Theme    string // system, light or dark
}

// Account is the user's own settings page.
type Account struct {
	Theme                      string
	AboutMe, AnswerStyle       string
	MaxAboutMe, MaxAnswerStyle int
	Notice, Error              string
}

// AuthForm refills the setup and login forms after a failed attempt.
type AuthForm struct {
	Username string
	Error    string
}

// SessionItem is one chat session in the sidebar.
type SessionItem struct {
	ID, Title string
	UpdatedAt time.Time
	Active    bool // the session shown on this page
	Temporary bool // neither reads nor writes long-term memory
}

// SessionList is one page of the sidebar.
type SessionList struct {
	Items      []SessionItem
	NextCursor string // "" = no more
}

// Message is one stored chat message.
type Message struct {
	ID     int64 // the stored message's id: what Edit, Regenerate and the version pager name (0: not offered)
	Seq    int64
	Role   string // user|assistant (anything else is shown as plain text)
	HTML   string // sanitised markdown for assistant messages
	Text   string // raw text: user messages are shown as plain text (white-space: pre-wrap); an assistant reply's markdown, for Copy
	Status string // complete|stopped|error ("" means complete)
	Error  string // an error's message, or why a stopped reply stopped (shown under it)
	// Interrupted: the reply was cut off by its process dying (badge "interrupted").
	Interrupted bool
	Model       string
	CreatedAt   time.Time
	Reasoning   string     // the model's reasoning or thinking text, shown collapsed above the answer
	Tools       []ToolCard // the tool calls of an assistant step, shown below its text
	Memories    int        // long-term memories the reply was given (a link to the Memories page)
	// Saved are the memories the message's explicit "remember …" created (chips with
	// Undo); Suggestions what extraction proposes under "ask before saving".
	Saved       []SavedMemory
	Suggestions []MemorySuggestion
	// RunID links the reply to its run ("How was this answered?"); RunPending shows
	// a placeholder instead, which FrameRunLink fills when the live run has ended.
	SessionID, RunID string
	RunPending       bool
	Target           bool   // the message a search result opened the chat at (highlighted)
	Files            []File // a user message's attached files
	// Versions: the message has other versions (an edit, a regenerated reply); the
	// pager ‹ 2/3 › flips between them. nil when it has none.
	Versions *Versions
	// TurnEnd: the reply that ends its turn, which offers Regenerate (Retry after an
	// error or a stop).
	TurnEnd bool
}

// File is a file attached to a user message: an image shows as a thumbnail that opens
// it, any other file as a chip that downloads it.
type File struct {
	Name, URL string
	Size      int64
	Image     bool
}

// Versions is where a message stands among its versions: Index of Count, and the ids
// of the previous and next versions (0 at either end).
type Versions struct {
	Index, Count int
	Prev, Next   int64
}

// Saved-memory chip states.
const (
	SavedShown  = "saved"  // still as saved: Undo is offered
	SavedUndone = "undone" // Undo removed it
	SavedGone   = "gone"   // forgotten some other way since
	SavedEdited = "edited" // edited since: Undo would throw the edit away, so none is offered
)

// SavedMemory is one memory an explicit save created, as its chip on the reply shows it.
type SavedMemory struct {
	ID, SessionID string
	State         string // a Saved* constant
}

// MemorySuggestion is a memory write waiting for the user's Accept or Reject.
type MemorySuggestion struct {
	ID, Op, Kind, Text string
	ChatURL            string // where it was proposed ("" when that chat is unknown)
	CreatedAt          time.Time
	ExpiresAt          time.Time
}

// ToolCard is one tool call of an assistant step: what was asked and what came back.
type ToolCard struct {
	ID, Name  string        // ID is Atrium's key of the call (store.ToolCallKey), not the provider's id; ToolDOMID makes the element id
	Args      string        // pretty-printed JSON arguments
	Status    string        // running|ok|error
	ErrorCode string        // e.g. invalid_arguments, timeout (when Status is error)
	Result    string        // result preview (the web layer caps it at about 2,000 characters)
	Truncated bool          // the preview is cut; the full result is stored
	Duration  time.Duration // 0 while running
}

// LiveMessage is the assistant reply being streamed: finished blocks and the
// unfinished tail, both already rendered by internal/markdown.
type LiveMessage struct {
	BlocksHTML, TailHTML, Model string
	Reasoning                   string // reasoning streamed so far, plain text
}

// ModelOption is one entry of a model select; Value is what the form posts.
type ModelOption struct {
	Value, Label string
	Selected     bool
	Vision       bool // the model takes images (the composer warns before uploading one otherwise)
}

// Chat is the chat page.
type Chat struct {
	Session         SessionItem
	Sessions        SessionList
	Messages        []Message
	OlderCursor     int64 // seq of the first shown message when older ones exist, else 0
	NewerCursor     int64 // seq of the last shown message when newer ones exist (opened at an old message), else 0
	At              int64 // the message the chat was opened at (a search result), else 0
	Live            *LiveMessage
	RunState        string // idle|streaming|queued ("" means idle)
	Models          []ModelOption
	MaxMessageBytes int           // 0 = no hint for the browser; the server enforces it anyway
	Notice          string        // e.g. no model configured
	Task            TaskPanel     // SessionID may be left empty: Session.ID is used
	Meter           *ContextMeter // nil before the session's first turn
	MCP             *MCPIndicator // nil: MCP is not set up (no indicator, resources or prompts)
	SystemPrompt    string        // the chat's own instructions
	MaxSystemPrompt int
}

// TaskPanel is the session's working memory as the side panel shows and edits it.
type TaskPanel struct {
	SessionID, Goal, Stage string
	Params                 string // pretty-printed JSON object, or ""
	UpdatedAt              time.Time
	Error                  string // a failed save, shown above the form
}

// MeterZone is one zone of the assembled context: pinned, summary, history, tools.
type MeterZone struct {
	Name           string
	Tokens, Budget int // Budget 0 = no budget of its own (bounded by the limit only)
}

// ContextMeter is the token count of the last turn's context, per zone.
type ContextMeter struct {
	Zones []MeterZone
	Total int
	Limit int // the model's window minus the reserve for the reply
}

// Provider is a configured model provider. It never carries the API key, only a hint.
type Provider struct {
	ID                           int64
	Name, Kind, BaseURL, KeyHint string
	Models                       []string
	Windows                      map[string]int // context window per model, where known
	ModelLines                   string         // the models as the edit form shows them
}

// ProviderForm refills a provider form after a failed submit. ID 0 is the add form;
// otherwise it is the edit form of that provider.
type ProviderForm struct {
	ID                          int64
	Name, Kind, BaseURL, Models string // Models: one per line
	Error                       string
}

// Settings is the providers settings page.
type Settings struct {
	Providers     []Provider
	Form          ProviderForm
	Models        []ModelOption // for the default model select
	Notice, Error string
}

// AdminUser is one row of the users page.
type AdminUser struct {
	ID             int64
	Username, Role string // Role: user|admin
	Disabled       bool
	CreatedAt      time.Time
	IsSelf         bool   // the admin looking at the page: no disable, demote or delete
	DeleteError    string // a refused deletion of this user (its form opens with it)
}

// Users is the users admin page. Form and Role refill the create form.
type Users struct {
	Users         []AdminUser
	Form          AuthForm
	Role          string
	Notice, Error string
}

// MCPTool is one tool a server exposes (its name without the server prefix).
type MCPTool struct {
	Name, Description string
}

// MCPStatus is the live part of a server's card: what the supervisor reports. It is
// all a websocket frame needs to re-render #mcp-server-<name>, so it never carries
// per-user data (no CSRF token, no forms).
type MCPStatus struct {
	Name, Transport string
	State           string // connecting|ready|degraded|failed|disabled
	Since           time.Time
	Error           string
	Tools           []MCPTool
	Resources       int
	Prompts         int
	Stderr          []string // last lines of a stdio child's stderr, shown as text
	Auth            string   // state "unauthorized": "connect" (never authorised) or "reauthorize"
}

// MCPServerItem is one configured server on the settings page. Secrets are only hints.
type MCPServerItem struct {
	ID                    int64
	Status                MCPStatus
	Enabled               bool
	Command               string
	Args                  []string // secret ones (SecretArgs, and detected credentials) REDACTED
	SecretArgs            []int    // indexes of Args the admin marked secret
	Dir, URL              string
	EnvHints, HeaderHints []string // "KEY=••••abcd", "Authorization: ••••"
	TokenHint             string
	AllowTools, DenyTools []string
	CallTimeout           int    // seconds, 0 = default
	SecretsError          string // the sealed secrets could not be opened
	// Sandbox is the stdio server's sandbox line ("sandboxed (Landlock ABI 7)", "not
	// sandboxed: kernel lacks Landlock", "off"); "" for remote servers.
	Sandbox               string
	ReadPaths, WritePaths []string
	SandboxOn, NetworkOn  bool
	// OAuth: a hand-registered client (its secret only as a hint) and the scopes.
	OAuthClientID, OAuthSecretHint string
	OAuthScopes                    []string
	Roots                          []string // file:// URIs offered to the server
	SamplingAlways                 bool     // its sampling requests run without asking
	ProgressMax                    int      // seconds a call reporting progress may run; 0 = default
}

// MCPForm refills an add (ID 0) or edit form after a failed submit.
type MCPForm struct {
	ID                                                     int64
	Name, Transport, Command, Args, Env, Dir, URL, Headers string
	AllowTools, DenyTools, Timeout                         string
	ReadPaths, WritePaths                                  string // one per line
	Sandbox, Network                                       bool
	OAuthClientID, OAuthScopes                             string
	SecretArgs                                             string // line numbers of secret arguments, e.g. "2 4"
	Roots                                                  string // one file:// URI per line
	SamplingAlways                                         bool
	ProgressMax                                            string // seconds
	Error                                                  string
}

// MCPIndicator sums up the servers' states for the chat header and the settings page.
type MCPIndicator struct {
	Total, Ready, Degraded, Failed, Connecting int // Total: enabled servers
	// Resources and Prompts are what the ready servers offer: the chat shows its
	// Resources button and "/" menu only when there is something to pick.
	Resources, Prompts int
}

// MCPSettings is the MCP servers settings page.
type MCPSettings struct {
	Servers     []MCPServerItem
	Form        MCPForm
	Import      string // the paste, refilled after an error
	ImportError string
	Indicator   MCPIndicator
	Notice      string
}

// MCPResourceGroup is one server's resources in the chat's resource panel.
type MCPResourceGroup struct {
	Server    string
	Error     string
	Resources []MCPResource
}

// MCPResource is one attachable resource.
type MCPResource struct {
	URI, Name, Description, MimeType string
}

// MCPPrompt is one prompt offered as a slash command.
type MCPPrompt struct {
	Server, Name, Description string
	Arguments                 []MCPPromptArg
}

// MCPPromptArg is one argument of a prompt.
type MCPPromptArg struct {
	Name, Description string
	Required          bool
}

// MemoryItem is one long-term memory on the Memories page.
type MemoryItem struct {
	ID, Kind, Text       string
	Source               string // chat|tool|manual|import
	ChatURL              string // the chat (and message) it was said in, when Source is chat; else ""
	CreatedAt, UpdatedAt time.Time
	LastUsedAt           *time.Time
	UseCount             int
}

// MemoryForm refills the add form (ID "") or the edit form of memory ID after a
// failed submit, with the user's typed text.
type MemoryForm struct {
	ID, Kind, Text string
	Error          string
}

// Memories is the user's Memories page: every memory, or the hits of a search.
type Memories struct {
	Items       []MemoryItem
	Total       int    // all of the user's memories, whatever the search shows
	Query       string // "" = no search: Items is the whole list
	LexicalOnly bool   // the search ran without vectors (the embedder failed)
	Reindexing  bool   // … because they are being rebuilt for a new embedding model
	Kinds       []string
	Add         MemoryForm
	Edit        MemoryForm // a failed edit, shown open on its memory
	ForgetError string     // a forget-all without the typed confirmation
	Notice      string
	Error       string            // a failed action on the list, e.g. forget-selected with nothing selected
	Audit       []MemoryAuditItem // what admins did to these memories, newest first
	Import      string            // the import paste, refilled after an error
	ImportError string
	Settings    MemorySettings
	Suggestions []MemorySuggestion // waiting for Accept or Reject, oldest first
	InstanceOff bool               // an admin turned memory off for the whole instance
}

// MemorySettings are the user's memory switches.
type MemorySettings struct {
	Enabled bool // memory is read and written in chats (never in temporary ones)
	Extract bool // the model is asked after each reply what is worth keeping
	Ask     bool // what it proposes is shown as suggestions instead of being saved
}

// ForgetAllWord is what the user types to confirm forgetting every memory: a
// deliberate step, since it cannot be undone.
const ForgetAllWord = "forget everything"

// MemoryAuditItem is one thing an admin did to the user's memories, as the
// user's Memories page lists it.
type MemoryAuditItem struct {
	At     time.Time
	Admin  string // "" when the admin's account was deleted
	Action string // reveal|delete|delete-all|reveal-run
	Count  int    // memories deleted (delete, delete-all) or shown (reveal)
	Run    string // the run shown (reveal-run)
}

// MemoryKindCount is how many of a user's memories are of one kind.
type MemoryKindCount struct {
	Kind  string
	Count int
}

// AdminMemoryUser is one user on the admin Memories page: metadata only, unless
// Revealed, when Items holds the texts for this one response.
type AdminMemoryUser struct {
	ID             int64
	Username       string
	Count          int
	Kinds          []MemoryKindCount // only kinds with memories
	Bytes          int64             // total size of the sealed texts
	Oldest, Newest time.Time         // zero when Count is 0
	LastUsed       *time.Time
	Revealed       bool
	Items          []MemoryItem
	ForgetError    string // a forget-all of this user without the typed confirmation
}

// AdminMemories is the admin Settings → Memories page.
type AdminMemories struct {
	Users         []AdminMemoryUser
	Notice, Error string
	Instance      MemoryInstance
}

// MemoryInstance is the instance memory settings form. Numbers are strings so that
// a bad value is shown back as typed; the API key is never shown, only KeySet.
type MemoryInstance struct {
	Enabled          bool
	Models           []ModelOption // "" first: the chat's model
	ModelMissing     bool          // the saved memory model is no longer configured
	EmbeddingsURL    string
	EmbeddingsModel  string
	Dimensions       string
	HalfLifeDays     string
	ForgetUnusedDays string
	KeySet           bool
	Error            string // why the form was not saved (nothing changed)
	TestWidth        int    // the Test button's result: the vector width…
	TestError        string // …or why the test failed
	Reindex          ReindexStatus
}

// ReindexStatus is the progress of rebuilding the memory vectors for a new embedder.
type ReindexStatus struct {
	Stale, Running bool
	Done, Total    int
	Err            string
}

// ToolProgress is a running tool's latest progress report (see FrameToolProgress).
type ToolProgress struct {
	CallID          string // the card's ToolCard.ID
	Progress, Total float64
	Message         string
}

// ConsentQuestion is an MCP server's request put to the person in a chat: a form to
// fill (Kind "form"), a link to follow ("url") or a sampling request to approve
// ("sampling"). Everything from the server is shown as text.
type ConsentQuestion struct {
	ID, SessionID, Server, Kind string
	Message                     string
	Fields                      []ConsentField   // form
	URL, URLHost                string           // url
	Sampling                    *ConsentSampling // sampling
	CanAlways                   bool             // sampling: the user may approve it for every request of the server (admins)
	Problem                     string           // why the last answer was not taken
	Outcome                     string           // "" while open; else what happened (accepted, declined, …)
}

// ConsentField is one field of an elicitation form.
type ConsentField struct {
	Name, Label, Description string
	Kind                     string // string, number, integer, boolean, enum, multi
	InputType                string // string: text, email, url, date, datetime-local
	Required                 bool
	Min, Max, Step           string // number and integer inputs ("" for none)
	MinLen, MaxLen           int
	Value                    string          // what the input shows (the default, or what was sent)
	Options                  []ConsentOption // enum and multi
	Error                    string
}

// ConsentOption is one choice of an enum field.
type ConsentOption struct {
	Value, Label string
	Selected     bool
}

// ConsentSampling is what a server asks the chat's model to do.
type ConsentSampling struct {
	SystemPrompt string
	Messages     []ConsentMessage
	Hints        []string
	MaxTokens    int
}

// ConsentMessage is one message of a sampling request.
type ConsentMessage struct{ Role, Text string }
