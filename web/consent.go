package web

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"atrium/internal/errs"
	"atrium/internal/mcp"
	"atrium/internal/store"
	"atrium/views"
)

// The consent rules for MCP servers' questions (elicitation forms and links, sampling
// requests), as the README states them:
//
//   - A question appears in the chat whose tool call it arrived during, in every tab
//     of that chat, and only there; it is answered by whoever owns the chat.
//   - While nobody watches the chat (no open socket) for ConsentUnwatched, the question
//     is declined: a form or link with "decline", a sampling request refused.
//   - Nobody answers for ConsentMaxWait: it ends ("cancel"; sampling refused).
//   - While it is open, the tool call's timeout is held (tools.Hold).
const (
	ConsentUnwatched = 20 * time.Second
	ConsentMaxWait   = 10 * time.Minute
)

// consents holds the questions open in chats. Safe for concurrent use.
type consents struct {
	s         *Server
	unwatched time.Duration
	maxWait   time.Duration
	poll      time.Duration

	mu   sync.Mutex
	open map[string]*openQuestion // by id
}

type openQuestion struct {
	q      mcp.Question
	view   views.ConsentQuestion
	answer chan mcp.Answer // cap 1, sent on by whoever claimed the question
	once   sync.Once
}

// claim takes the question for one answer, a person's or its end's: only the first
// claim succeeds, and an answer that claimed it is sent on answer.
func (oq *openQuestion) claim() bool {
	claimed := false
	oq.once.Do(func() { claimed = true })
	return claimed
}

func newConsents(s *Server) *consents {
	return &consents{s: s, unwatched: ConsentUnwatched, maxWait: ConsentMaxWait, poll: 100 * time.Millisecond,
		open: map[string]*openQuestion{}}
}

// Asker is what the MCP supervisor asks people through (set it as Supervisor.Asker).
func (s *Server) Asker() mcp.Asker { return s.consents }

// Ask implements mcp.Asker: it shows q in its chat and waits for the answer, for
// someone to watch, or for ctx.
func (cs *consents) Ask(ctx context.Context, q mcp.Question) (mcp.Answer, error) {
	oq := &openQuestion{q: q, answer: make(chan mcp.Answer, 1), view: cs.view(ctx, q)}
	cs.mu.Lock()
	cs.open[oq.view.ID] = oq
	cs.mu.Unlock()
	cs.s.Hub.broadcastTo(q.SessionID, renderFrame(views.FrameConsentAdd(oq.view)))
	cs.s.Log.Info("web: an MCP server asks in a chat", "server", q.Server, "session", q.SessionID, "kind", q.Kind)

	outcome, ans, err := cs.wait(ctx, oq)
	cs.mu.Lock()
	delete(cs.open, oq.view.ID)
	cs.mu.Unlock()
	done := oq.view
	done.Outcome = outcome
	cs.s.Hub.broadcastTo(q.SessionID, renderFrame(views.FrameConsentDone(done)))
	return ans, err
}

func (cs *consents) wait(ctx context.Context, oq *openQuestion) (string, mcp.Answer, error) {
	tick := time.NewTicker(cs.poll)
	defer tick.Stop()
	limit := time.NewTimer(cs.maxWait)
	defer limit.Stop()
	var unwatchedSince time.Time
	// end closes the question with outcome, unless a person's answer claimed it first:
	// that one is on its way (after "always" is saved) and stands.
	end := func(outcome string, a mcp.Answer, err error) (string, mcp.Answer, error) {
		if oq.claim() {
			return outcome, a, err
		}
		a = <-oq.answer
		return outcomeOf(a), a, nil
	}
	for {
		select {
		case a := <-oq.answer:
			return outcomeOf(a), a, nil
		case <-ctx.Done():
			return end("cancelled", mcp.Answer{Action: mcp.ActionCancel}, ctx.Err())
		case <-limit.C:
			return end("expired", mcp.Answer{Action: mcp.ActionCancel}, nil)
		case <-tick.C:
			if cs.s.Hub.Watching(oq.q.SessionID) > 0 {
				unwatchedSince = time.Time{}
				continue
			}
			now := time.Now()
			if unwatchedSince.IsZero() {
				unwatchedSince = now
			}
			if now.Sub(unwatchedSince) >= cs.unwatched {
				cs.s.Log.Info("web: an MCP server's question declined: nobody watches the chat", "server", oq.q.Server, "session", oq.q.SessionID)
				return end("unwatched", mcp.Answer{Action: mcp.ActionDecline}, nil)
			}
		}
	}
}

func outcomeOf(a mcp.Answer) string {
	switch {
	case a.Action == mcp.ActionAccept && a.Always:
		return "always"
	case a.Action == mcp.ActionAccept:
		return "accepted"
	case a.Action == mcp.ActionDecline:
		return "declined"
	}
	return "cancelled"
}

// forSession returns the session's open questions, oldest first.
func (cs *consents) forSession(sessionID string) []views.ConsentQuestion {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var out []views.ConsentQuestion
	for _, oq := range cs.open {
		if oq.q.SessionID == sessionID {
			out = append(out, oq.view)
		}
	}
	slices.SortFunc(out, func(a, b views.ConsentQuestion) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// consentSeq numbers questions, so that their ids sort by age.
var consentSeq atomic.Int64

// view maps a question to its view model, with a fresh id that sorts by age.
func (cs *consents) view(ctx context.Context, q mcp.Question) views.ConsentQuestion {
	v := views.ConsentQuestion{ID: fmt.Sprintf("%012d%s", consentSeq.Add(1), strings.ToLower(rand.Text()[:8])),
		SessionID: q.SessionID, Server: q.Server, Kind: string(q.Kind), Message: q.Message}
	switch q.Kind {
	case mcp.AskForm:
		for _, f := range q.Form.Fields {
			v.Fields = append(v.Fields, fieldView(f, f.Default, ""))
		}
	case mcp.AskURL:
		v.URL = q.URL
		if u, err := url.Parse(q.URL); err == nil {
			v.URLHost = u.Host
		}
	case mcp.AskSampling:
		sv := &views.ConsentSampling{SystemPrompt: q.Sampling.SystemPrompt, Hints: q.Sampling.Hints, MaxTokens: q.Sampling.MaxTokens}
		for _, m := range q.Sampling.Messages {
			sv.Messages = append(sv.Messages, views.ConsentMessage{Role: m.Role, Text: m.Content})
		}
		v.Sampling = sv
		if u, err := cs.s.Store.UserByID(ctx, q.OwnerID); err == nil && u.Role == store.RoleAdmin {
			v.CanAlways = true
		}
	}
	return v
}

// fieldView is one form field with the values it shows and its problem, if any.
func fieldView(f mcp.Field, values []string, problem string) views.ConsentField {
	v := views.ConsentField{Name: f.Name, Label: f.Title, Description: f.Description, Kind: string(f.Kind),
		Required: f.Required, MinLen: f.MinLen, MaxLen: f.MaxLen, Error: problem}
	if len(values) > 0 {
		v.Value = values[0]
	}
	switch f.Kind {
	case mcp.FieldString:
		v.InputType = map[string]string{"email": "email", "uri": "url", "date": "date", "date-time": "datetime-local"}[f.Format]
		if v.InputType == "" {
			v.InputType = "text"
		}
	case mcp.FieldNumber, mcp.FieldInteger:
		v.Step = "any"
		if f.Kind == mcp.FieldInteger {
			v.Step = "1"
		}
		if f.Min != nil {
			v.Min = strconv.FormatFloat(*f.Min, 'f', -1, 64)
		}
		if f.Max != nil {
			v.Max = strconv.FormatFloat(*f.Max, 'f', -1, 64)
		}
	case mcp.FieldEnum, mcp.FieldMulti:
		for _, o := range f.Options {
			sel := false
			for _, x := range values {
				sel = sel || x == o.Value
			}
			v.Options = append(v.Options, views.ConsentOption{Value: o.Value, Label: o.Label, Selected: sel})
		}
	}
	return v
}

// answerConsent takes the answer to an MCP server's question in a chat the user owns
// (POST /s/:id/consent/:qid, action accept|always|decline|cancel plus the form's
// fields) and returns the question's box: answered, or the form again with what is
// wrong. A question no longer open answers with a line saying so.
func (s *Server) answerConsent(c echo.Context) error {
	ss, err := s.ownedSession(c)
	if err != nil {
		return err
	}
	id := c.Param("qid")
	s.consents.mu.Lock()
	oq := s.consents.open[id]
	s.consents.mu.Unlock()
	if oq == nil || oq.q.SessionID != ss.ID {
		return render(c, http.StatusOK, views.ConsentBox(views.ConsentQuestion{ID: id, SessionID: ss.ID, Server: "The server", Outcome: "closed"}))
	}
	form, err := c.FormParams()
	if err != nil {
		return errs.E(errs.Invalid, "The answer could not be read.")
	}
	ans := mcp.Answer{Action: form.Get("action")}
	switch ans.Action {
	case mcp.ActionAccept:
		if oq.q.Kind == mcp.AskForm {
			content, problems := oq.q.Form.Answer(form)
			if problems != nil {
				v := oq.view
				v.Fields = nil
				for _, f := range oq.q.Form.Fields {
					v.Fields = append(v.Fields, fieldView(f, form[f.Name], problems[f.Name]))
				}
				v.Problem = "Some answers need a change before they are sent."
				return render(c, http.StatusOK, views.ConsentBox(v))
			}
			ans.Content = content
		}
	case "always":
		if oq.q.Kind != mcp.AskSampling || !oq.view.CanAlways {
			return errs.E(errs.Invalid, "Only an admin can approve a server's sampling for good.")
		}
		ans = mcp.Answer{Action: mcp.ActionAccept, Always: true}
	case mcp.ActionDecline, mcp.ActionCancel:
	default:
		return errs.E(errs.Invalid, "The answer must be accept, decline or cancel.")
	}
	// Claimed before "always" is saved: a second click, or one racing the question's
	// end, must not turn it on while the reply says closed.
	v := oq.view
	if !oq.claim() {
		v.Outcome = "closed"
		return render(c, http.StatusOK, views.ConsentBox(v))
	}
	if ans.Always {
		if err := s.allowSampling(c.Request().Context(), oq.q.Server); err != nil {
			// The question is taken: the person approved this request at least.
			oq.answer <- mcp.Answer{Action: mcp.ActionAccept}
			return err
		}
	}
	oq.answer <- ans
	v.Outcome = outcomeOf(ans)
	return render(c, http.StatusOK, views.ConsentBox(v))
}

// allowSampling stores "always" in the server's settings: its sampling requests run
// without asking until an admin unticks it on the server's form.
func (s *Server) allowSampling(ctx context.Context, server string) error {
	rows, err := s.Store.ListMCPServers(ctx)
	if err != nil {
		return err
	}
	for _, row := range rows {
		if row.Name != server {
			continue
		}
		cfg, err := s.mcpConfigs.Config(ctx, row)
		if err != nil {
			return err
		}
		cfg.SamplingAlways = true
		if err := s.mcpConfigs.Save(ctx, &cfg); err != nil {
			return err
		}
		return s.ApplyMCP(ctx)
	}
	return errs.E(errs.NotFound, "The MCP server %q is no longer configured.", server)
}
