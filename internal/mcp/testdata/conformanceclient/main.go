// Command conformanceclient is the client that the MCP conformance suite
// (@modelcontextprotocol/conformance, client scenarios) starts as
// `conformanceclient [-plain] <server URL>`. By default it goes through Atrium's own
// MCP supervisor, OAuth store and flow (a real SQLite file, sealed grants); with
// -plain it is a bare mcp-go client with mcp-go's OAuth handler, for comparison.
// Either way it connects, authorises when asked (playing the browser: it opens the
// authorization URL and reads the code from the redirect), lists the tools and calls
// each once with arguments made from its schema. The exit status says whether it got
// that far. It lives under testdata so that it is no part of the product; the test
// that runs the suite (conformance_test.go) builds it.
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"atrium/internal/crypto"
	"atrium/internal/llm"
	"atrium/internal/mcp"
	"atrium/internal/store"
	"atrium/internal/tools"
)

// redirectURI is where the suite's authorization server sends the "browser" back;
// nothing listens there: the code is read from the redirect itself.
const redirectURI = "http://localhost:3000/callback"

// scenarioContext is MCP_CONFORMANCE_CONTEXT: pre-registered client credentials.
type scenarioContext struct {
	ClientID     string `json:"client_id"`
	ClientSecret string `json:"client_secret"`
}

func main() {
	plain := flag.Bool("plain", false, "use a bare mcp-go client instead of Atrium's supervisor")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: conformanceclient [-plain] <server URL>")
		os.Exit(2)
	}
	var sc scenarioContext
	if c := os.Getenv("MCP_CONFORMANCE_CONTEXT"); c != "" {
		_ = json.Unmarshal([]byte(c), &sc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	run := runAtrium
	if *plain {
		run = runPlain
	}
	if err := run(ctx, flag.Arg(0), sc); err != nil {
		fmt.Fprintln(os.Stderr, "conformanceclient:", err)
		os.Exit(1)
	}
}

// browse opens authURL as a browser would, without following the redirect back, and
// returns the code and state it carries.
func browse(ctx context.Context, authURL string) (code, state string, err error) {
	hc := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, authURL, nil)
	if err != nil {
		return "", "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", "", err
	}
	resp.Body.Close()
	back, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || resp.StatusCode/100 != 3 {
		return "", "", fmt.Errorf("authorization: %s, no redirect back", resp.Status)
	}
	if e := back.Query().Get("error"); e != "" {
		return "", "", fmt.Errorf("authorization refused: %s", e)
	}
	return back.Query().Get("code"), back.Query().Get("state"), nil
}

// argsFor makes arguments for a tool from its input schema's properties.
func argsFor(schema json.RawMessage) map[string]any {
	var s struct {
		Properties map[string]struct {
			Type any `json:"type"`
		} `json:"properties"`
	}
	_ = json.Unmarshal(schema, &s)
	out := map[string]any{}
	n := 2
	for name, p := range s.Properties {
		switch fmt.Sprint(p.Type) {
		case "number", "integer":
			out[name] = n
			n++
		case "boolean":
			out[name] = true
		case "array":
			out[name] = []any{}
		case "object":
			out[name] = map[string]any{}
		default:
			out[name] = "test"
		}
	}
	return out
}

// acceptAsker answers a server's questions like a person who submits Atrium's form as
// it is shown: each field holds what Atrium's form code filled in from the schema (its
// default, or nothing), and Form.Answer checks and types the values as it does for a
// browser's submission. Sampling is declined: the conformance run has no model.
type acceptAsker struct{ log *slog.Logger }

func (a acceptAsker) Ask(_ context.Context, q mcp.Question) (mcp.Answer, error) {
	if q.Kind != mcp.AskForm {
		a.log.Info("conformanceclient: declined", "kind", q.Kind)
		return mcp.Answer{Action: mcp.ActionDecline}, nil
	}
	values := map[string][]string{}
	for _, f := range q.Form.Fields {
		values[f.Name] = f.Default
	}
	content, problems := q.Form.Answer(values)
	if problems != nil {
		// A person could not submit this form without typing: they cancel.
		a.log.Info("conformanceclient: the form as shown does not check", "problems", problems)
		return mcp.Answer{Action: mcp.ActionCancel}, nil
	}
	a.log.Info("conformanceclient: accepted the form", "content", content)
	return mcp.Answer{Action: mcp.ActionAccept, Content: content}, nil
}

func runAtrium(ctx context.Context, serverURL string, sc scenarioContext) error {
	dir, err := os.MkdirTemp("", "atrium-conformance-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := store.Open(ctx, filepath.Join(dir, "atrium.db"))
	if err != nil {
		return err
	}
	defer db.Close()
	master := make([]byte, crypto.KeySize)
	_, _ = rand.Read(master)
	keys, err := crypto.NewKeyring(ctx, master, db)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	reg := tools.NewRegistry(nil, nil)
	sup := mcp.NewSupervisor(reg, log, nil)
	sup.OAuth = &mcp.OAuthStore{Rows: db, Keys: keys}
	sup.Asker = acceptAsker{log}
	sup.FailAfter = 1
	defer sup.Close()

	cfg := mcp.ServerConfig{Name: "conf", Transport: mcp.TransportHTTP, URL: serverURL, Enabled: true,
		OAuthClientID: sc.ClientID, OAuthClientSecret: sc.ClientSecret}
	if err := (&mcp.ConfigStore{Rows: db, Keys: keys}).Save(ctx, &cfg); err != nil {
		return err
	}
	sup.Apply(ctx, []mcp.ServerConfig{cfg})
	wait := func(states ...mcp.State) (mcp.Status, error) {
		for {
			for _, st := range sup.Statuses() {
				for _, s := range states {
					if st.State == s {
						return st, nil
					}
				}
			}
			select {
			case <-ctx.Done():
				return mcp.Status{}, fmt.Errorf("waiting for %v: %w", states, ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	// authorise plays the admin's Connect and the browser; Atrium asks for the scopes.
	authorise := func() error {
		flow, authURL, err := sup.BeginOAuth(ctx, cfg, 1, redirectURI)
		if err != nil {
			return err
		}
		code, state, err := browse(ctx, authURL)
		if err != nil {
			return err
		}
		var fs mcp.OAuthFlows
		fs.Put(flow, time.Now())
		f, ok := fs.Take(state, 1, time.Now())
		if !ok {
			return errors.New("the state came back changed")
		}
		return sup.FinishOAuth(ctx, f, code)
	}
	// An admin authorises when the card asks (first, or for more scope after a 403
	// insufficient_scope), at most maxAuthorisations times: a server that keeps asking
	// is given up on, as a person would.
	const maxAuthorisations = 3
	authorisations := 0
	for {
		st, err := wait(mcp.StateReady, mcp.StateUnauthorized, mcp.StateFailed)
		if err != nil {
			return err
		}
		if st.State == mcp.StateUnauthorized {
			if authorisations == maxAuthorisations {
				return fmt.Errorf("still unauthorised after %d authorisations: %s", authorisations, st.Error)
			}
			authorisations++
			if err := authorise(); err != nil {
				return err
			}
			// Until the supervisor takes the new grant up, the card still shows the
			// old request: wait for a state entered after it.
			for {
				now, err := wait(mcp.StateReady, mcp.StateFailed, mcp.StateUnauthorized)
				if err != nil {
					return err
				}
				if now.State != mcp.StateUnauthorized || now.Since.After(st.Since) {
					break
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(20 * time.Millisecond):
				}
			}
			continue
		}
		if st.State != mcp.StateReady {
			return fmt.Errorf("server %s: %s", st.State, st.Error)
		}
		stepUp := false
		for _, t := range reg.Enabled() {
			if !strings.HasPrefix(t.Name, "conf__") {
				continue
			}
			args, _ := json.Marshal(argsFor(t.Schema))
			res := reg.Dispatch(ctx, "conformance", 1, llm.ToolCall{ID: "c-" + t.Name, Name: t.Name, Arguments: string(args)})
			fmt.Fprintf(os.Stderr, "called %s: error=%v %.300s\n", t.Name, res.IsError, res.Content)
			if res.IsError && strings.Contains(res.Content, "must re-authorise") {
				stepUp = true
				break
			}
		}
		if !stepUp {
			return nil
		}
		// The card now asks to re-authorise with the wider scope.
		if _, err := wait(mcp.StateUnauthorized, mcp.StateFailed); err != nil {
			return err
		}
	}
}

// runPlain is how mcp-go's own examples go about it: a plain client first; on a 401,
// a client with mcp-go's OAuth handler (told the metadata URL from the 401), dynamic
// registration unless pre-registered, and the authorization code flow with PKCE.
func runPlain(ctx context.Context, serverURL string, sc scenarioContext) error {
	initialize := func(cl *client.Client) error {
		if err := cl.Start(ctx); err != nil {
			return err
		}
		req := mcpgo.InitializeRequest{}
		req.Params.ProtocolVersion = mcpgo.LATEST_PROTOCOL_VERSION
		req.Params.ClientInfo = mcpgo.Implementation{Name: "mcp-go-plain", Version: "1"}
		_, err := cl.Initialize(ctx, req)
		return err
	}
	cl, err := client.NewStreamableHttpClient(serverURL)
	if err != nil {
		return err
	}
	defer cl.Close()
	err = initialize(cl)
	if client.IsAuthorizationRequiredError(err) {
		oc := transport.OAuthConfig{ClientID: sc.ClientID, ClientSecret: sc.ClientSecret, RedirectURI: redirectURI,
			PKCEEnabled: true, TokenStore: transport.NewMemoryTokenStore(), ProtectedResourceMetadataURL: client.GetResourceMetadataURL(err)}
		if cl, err = client.NewOAuthStreamableHttpClient(serverURL, oc); err != nil {
			return err
		}
		defer cl.Close()
		err = initialize(cl)
		if !client.IsOAuthAuthorizationRequiredError(err) {
			return fmt.Errorf("with OAuth, before authorising: %v", err)
		}
		h := client.GetOAuthHandler(err)
		if h.GetClientID() == "" {
			if err := h.RegisterClient(ctx, "mcp-go-plain"); err != nil {
				return err
			}
		}
		verifier, _ := client.GenerateCodeVerifier()
		state, _ := client.GenerateState()
		authURL, err := h.GetAuthorizationURL(ctx, state, client.GenerateCodeChallenge(verifier))
		if err != nil {
			return err
		}
		code, back, err := browse(ctx, authURL)
		if err != nil {
			return err
		}
		if err := h.ProcessAuthorizationResponse(ctx, code, back, verifier); err != nil {
			return err
		}
		req := mcpgo.InitializeRequest{}
		req.Params.ProtocolVersion = mcpgo.LATEST_PROTOCOL_VERSION
		req.Params.ClientInfo = mcpgo.Implementation{Name: "mcp-go-plain", Version: "1"}
		if _, err := cl.Initialize(ctx, req); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	list, err := cl.ListTools(ctx, mcpgo.ListToolsRequest{})
	if err != nil {
		return err
	}
	for _, t := range list.Tools {
		schema, _ := json.Marshal(t.InputSchema)
		req := mcpgo.CallToolRequest{}
		req.Params.Name = t.Name
		req.Params.Arguments = argsFor(schema)
		_, err := cl.CallTool(ctx, req)
		fmt.Fprintf(os.Stderr, "called %s: %v\n", t.Name, err)
	}
	return nil
}
