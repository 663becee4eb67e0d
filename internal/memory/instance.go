package memory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"atrium/internal/crypto"
	"atrium/internal/errs"
)

// Instance are the admins' memory settings for the whole instance (Settings →
// Memories). They are kept in the settings table; the flags and ATRIUM_* variables
// are only their values until an admin first saves them.
type Instance struct {
	// Enabled: memory is read and written in chats. Off, recall, explicit requests,
	// the memory tools and extraction all stop; the Memories pages still work.
	Enabled bool `json:"enabled"`
	// Model is the model extraction asks, as a providers choice ("id:model"); ""
	// means the chat's own model.
	Model string `json:"model,omitempty"`
	// The OpenAI-compatible embeddings endpoint; "" means the offline embedder.
	EmbeddingsURL        string `json:"embeddings_url,omitempty"`
	EmbeddingsModel      string `json:"embeddings_model,omitempty"`
	EmbeddingsDimensions int    `json:"embeddings_dimensions,omitempty"`
	// HalfLifeDays: an unused memory's recency weight halves after this many days
	// (with confidence and use, recency is part of every hit's score).
	HalfLifeDays int `json:"half_life_days"`
	// ForgetUnusedDays: a memory neither used nor updated for this many days is
	// forgotten by the hourly purge; 0 keeps memories until they are forgotten.
	ForgetUnusedDays int `json:"forget_unused_days,omitempty"`
	// KeySet says an embeddings API key is stored; the key itself never leaves
	// this package except to the endpoint.
	KeySet bool `json:"-"`
}

// InstanceInput is what an admin submits: the settings, and the API key typed
// ("" keeps the stored one) or cleared.
type InstanceInput struct {
	Instance
	APIKey   string
	ClearKey bool
}

// Limits of the instance settings.
const (
	MaxHalfLifeDays     = 3650
	MaxForgetUnusedDays = 3650
	maxURLLen           = 2000
	maxEmbedModelLen    = 200
	maxAPIKeyLen        = 1000
	maxModelChoiceLen   = 300
)

// DefaultInstance is the instance setting without flags or a saved choice.
var DefaultInstance = Instance{Enabled: true, HalfLifeDays: int(DefaultRanking.HalfLife / (24 * time.Hour))}

const instanceSetting = "memory.instance"

// storedInstance is the settings row: the settings and the sealed API key.
type storedInstance struct {
	Instance
	KeySealed []byte `json:"key_sealed,omitempty"`
}

// ErrReindexing is the VectorErr of a search while the vectors are being rebuilt
// for a new embedder: the old vectors are not comparable with the new query's.
var ErrReindexing = errors.New("memory: the vectors are being rebuilt for a new embedding model")

// instanceState is the Service's current instance settings and embedder, and the
// progress of the reindex that follows an embedder change.
type instanceState struct {
	mu   sync.Mutex
	cur  Instance
	key  string // the embeddings API key in use, plaintext
	emb  Embedder
	name string // names the embedder's vector space, for Reindex
	gen  uint64 // bumped when name changes
	// stale: the stored vectors were made by another embedder than emb; a search is
	// lexical until Reindex has rebuilt them.
	stale    bool
	progress ReindexStatus
	wake     chan struct{} // a reindex is wanted
}

// ReindexStatus is what the admin page shows of the index rebuild.
type ReindexStatus struct {
	Stale   bool // the vectors are not (yet) the current embedder's
	Running bool
	Done    int
	Total   int
	Err     string // the last failure, for the admin; "" after a success
}

func (st *instanceState) init(emb Embedder) {
	st.cur, st.emb, st.wake = DefaultInstance, emb, make(chan struct{}, 1)
}

// embedder returns the current embedder and the generation of its vector space.
func (s *Service) embedder() (Embedder, uint64) {
	s.inst.mu.Lock()
	defer s.inst.mu.Unlock()
	return s.inst.emb, s.inst.gen
}

// embedQuery embeds a search query, or says that vectors cannot be used now.
func (s *Service) embedQuery(ctx context.Context, query string) ([][]float32, error) {
	s.inst.mu.Lock()
	emb, stale := s.inst.emb, s.inst.stale
	s.inst.mu.Unlock()
	if stale {
		return nil, ErrReindexing
	}
	return emb.Embed(ctx, []string{query})
}

// EmbedderName names the current embedder's vector space (endpoint, model, width),
// for Reindex.
func (s *Service) EmbedderName() string {
	s.inst.mu.Lock()
	defer s.inst.mu.Unlock()
	return s.inst.name
}

// ReindexRequests delivers a value when the embedder changed and Reindex should run.
func (s *Service) ReindexRequests() <-chan struct{} { return s.inst.wake }

// ReindexStatus reports the index rebuild.
func (s *Service) ReindexStatus() ReindexStatus {
	s.inst.mu.Lock()
	defer s.inst.mu.Unlock()
	p := s.inst.progress
	p.Stale = s.inst.stale
	return p
}

// Instance returns the instance settings in force.
func (s *Service) Instance() Instance {
	s.inst.mu.Lock()
	defer s.inst.mu.Unlock()
	in := s.inst.cur
	in.KeySet = s.inst.key != ""
	return in
}

// ranking is s.Ranking with the instance's half-life.
func (s *Service) ranking() Ranking {
	r := s.Ranking
	if d := s.Instance().HalfLifeDays; d > 0 {
		r.HalfLife = time.Duration(d) * 24 * time.Hour
	}
	return r
}

// newEmbedder builds the embedder of in and names its vector space; the key is not
// part of the name (another key, the same vectors).
func newEmbedder(in Instance, key string) (Embedder, string) {
	if in.EmbeddingsURL == "" {
		return HashEmbedder{}, "hash"
	}
	return &OpenAIEmbedder{BaseURL: in.EmbeddingsURL, Model: in.EmbeddingsModel, APIKey: key, Dimensions: in.EmbeddingsDimensions},
		fmt.Sprintf("openai|%s|%s|%d", in.EmbeddingsURL, in.EmbeddingsModel, in.EmbeddingsDimensions)
}

// LoadInstance puts the instance settings in force: the saved ones, or def (from
// the flags and environment, with its API key defKey) when an admin never saved
// any. It also learns whether the stored vectors are the embedder's, so that a
// search stays lexical until Reindex has run. A saved row that cannot be read is an
// error, but settings are in force all the same (def for an unreadable row, the saved
// ones without a key for an undecryptable key): start-up goes on, and an admin
// saves the form again.
func (s *Service) LoadInstance(ctx context.Context, def Instance, defKey string) error {
	in, key, loadErr := s.savedInstance(ctx, def, defKey)
	s.apply(in, key)
	have, err := s.db.Setting(ctx, indexSetting)
	if err != nil && !errs.Is(err, errs.NotFound) {
		return errors.Join(loadErr, fmt.Errorf("memory: instance settings: %w", err))
	}
	want := IndexVersion + "|" + s.EmbedderName()
	if have == "" {
		// Never indexed. Without memories there is nothing to rebuild: the index is
		// current at once, so the first searches of a new instance do not wait, lexical
		// only, for the background Reindex to get its turn (on a loaded machine it came
		// after the first saves). With memories, Reindex must finish before vectors count.
		stats, err := s.db.MemoryStatsByOwner(ctx)
		if err == nil && len(stats) == 0 {
			err = s.db.SetSetting(ctx, indexSetting, want)
			if err == nil {
				have = want
			}
		}
		if err != nil {
			return errors.Join(loadErr, fmt.Errorf("memory: instance settings: %w", err))
		}
	}
	s.inst.mu.Lock()
	s.inst.stale = have != want
	s.inst.mu.Unlock()
	return loadErr
}

func (s *Service) savedInstance(ctx context.Context, def Instance, defKey string) (Instance, string, error) {
	v, err := s.db.Setting(ctx, instanceSetting)
	switch {
	case errs.Is(err, errs.NotFound):
		return def, defKey, nil
	case err != nil:
		return def, defKey, fmt.Errorf("memory: instance settings: %w", err)
	}
	var st storedInstance
	if err := json.Unmarshal([]byte(v), &st); err != nil {
		return def, defKey, fmt.Errorf("memory: instance settings: %w", err)
	}
	if len(st.KeySealed) == 0 {
		return st.Instance, "", nil
	}
	pt, err := s.keys.Open(ctx, 0, st.KeySealed, instanceKeyAD)
	if err != nil {
		return st.Instance, "", fmt.Errorf("memory: the embeddings API key cannot be decrypted; enter it again in Settings → Memories: %w", err)
	}
	return st.Instance, string(pt), nil
}

var instanceKeyAD = crypto.AD("memory", "instance", "embeddings_key")

// apply puts in and key in force. A new vector space marks the stored vectors
// stale and asks for a reindex; a new key alone swaps the embedder only.
func (s *Service) apply(in Instance, key string) {
	emb, name := newEmbedder(in, key)
	s.inst.mu.Lock()
	changed := name != s.inst.name
	in.KeySet = false
	s.inst.cur, s.inst.key, s.inst.emb = in, key, emb
	if changed {
		s.inst.name = name
		s.inst.gen++
		s.inst.stale = true
	}
	s.inst.mu.Unlock()
	if key != "" && s.OnSecret != nil {
		s.OnSecret(key)
	}
	if changed {
		select {
		case s.inst.wake <- struct{}{}:
		default:
		}
	}
}

// CheckInstance validates the settings (not the model choice, which only the
// providers know); the error is errs.Invalid and names the field.
func CheckInstance(in InstanceInput) error {
	if in.EmbeddingsURL != "" {
		u, err := url.Parse(in.EmbeddingsURL)
		switch {
		case len(in.EmbeddingsURL) > maxURLLen:
			return errs.E(errs.Invalid, "Embeddings endpoint: at most %d characters.", maxURLLen)
		case err != nil || (u.Scheme != "http" && u.Scheme != "https"):
			return errs.E(errs.Invalid, "Embeddings endpoint: %q is not an http:// or https:// URL.", in.EmbeddingsURL)
		case u.Host == "" || u.Hostname() == "":
			return errs.E(errs.Invalid, "Embeddings endpoint: %q has no host.", in.EmbeddingsURL)
		case u.User != nil:
			// It would be shown on the page and in logs: the key has its own field.
			return errs.E(errs.Invalid, "Embeddings endpoint: put no user name or password in the URL; use the API key field.")
		case u.RawQuery != "" || u.Fragment != "":
			return errs.E(errs.Invalid, "Embeddings endpoint: the URL must not have a query or fragment.")
		}
		if strings.TrimSpace(in.EmbeddingsModel) == "" {
			return errs.E(errs.Invalid, "Embeddings model: name the model the endpoint should use, e.g. all-minilm.")
		}
	} else if in.EmbeddingsModel != "" || in.EmbeddingsDimensions != 0 {
		return errs.E(errs.Invalid, "Embeddings model: set an embeddings endpoint too, or leave both empty for the built-in offline embedder.")
	}
	if len(in.EmbeddingsModel) > maxEmbedModelLen || !printable(in.EmbeddingsModel) {
		return errs.E(errs.Invalid, "Embeddings model: at most %d printable characters.", maxEmbedModelLen)
	}
	if in.EmbeddingsDimensions < 0 || in.EmbeddingsDimensions > MaxDims {
		return errs.E(errs.Invalid, "Dimensions: %d is out of range (0 for the model's own width, up to %d).", in.EmbeddingsDimensions, MaxDims)
	}
	if in.HalfLifeDays < 1 || in.HalfLifeDays > MaxHalfLifeDays {
		return errs.E(errs.Invalid, "Half-life: %d days is out of range (1 to %d).", in.HalfLifeDays, MaxHalfLifeDays)
	}
	if in.ForgetUnusedDays < 0 || in.ForgetUnusedDays > MaxForgetUnusedDays {
		return errs.E(errs.Invalid, "Forget unused memories: %d days is out of range (0 for never, up to %d).", in.ForgetUnusedDays, MaxForgetUnusedDays)
	}
	if len(in.Model) > maxModelChoiceLen || !printable(in.Model) {
		return errs.E(errs.Invalid, "Memory model: unknown model choice.")
	}
	// The key goes into an HTTP header: a line break would add headers of its own.
	if len(in.APIKey) > maxAPIKeyLen || strings.ContainsFunc(in.APIKey, unicode.IsSpace) || !printable(in.APIKey) {
		return errs.E(errs.Invalid, "API key: at most %d characters, without spaces or line breaks.", maxAPIKeyLen)
	}
	return nil
}

func printable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) })
}

// clean trims what an admin typed.
func (in InstanceInput) clean() InstanceInput {
	in.EmbeddingsURL = strings.TrimSuffix(strings.TrimSpace(in.EmbeddingsURL), "/")
	in.EmbeddingsModel = strings.TrimSpace(in.EmbeddingsModel)
	in.APIKey = strings.TrimSpace(in.APIKey)
	in.Model = strings.TrimSpace(in.Model)
	return in
}

// keyFor is the API key in will use: the typed one, none when cleared, else the
// one in force. The stored key goes only to the origin it was entered for: another
// scheme, host or port needs it typed again, so that nobody can send it elsewhere
// with a Test.
func (s *Service) keyFor(in InstanceInput) (string, error) {
	switch {
	case in.ClearKey:
		return "", nil
	case in.APIKey != "":
		return in.APIKey, nil
	}
	s.inst.mu.Lock()
	key, cur := s.inst.key, s.inst.cur.EmbeddingsURL
	s.inst.mu.Unlock()
	if key != "" && in.EmbeddingsURL != "" && origin(in.EmbeddingsURL) != origin(cur) {
		return "", errs.E(errs.Invalid, "API key: the endpoint is on another host than the stored key was entered for; type the key again, or tick “Remove the stored key”.")
	}
	return key, nil
}

// origin is a URL's scheme://host:port ("" when it has none).
func origin(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return ""
	}
	return strings.ToLower(u.Scheme + "://" + u.Host)
}

// SetInstance validates and saves the instance settings and puts them in force at
// once: a new embeddings endpoint, model or width swaps the embedder and asks for a
// reindex (ReindexRequests). A bad value is errs.Invalid and changes nothing. The
// API key is sealed under the instance's data key.
func (s *Service) SetInstance(ctx context.Context, in InstanceInput) error {
	in = in.clean()
	if err := CheckInstance(in); err != nil {
		return err
	}
	key, err := s.keyFor(in)
	if err != nil {
		return err
	}
	st := storedInstance{Instance: in.Instance}
	st.KeySet = false
	if key != "" {
		sealed, err := s.keys.Seal(ctx, 0, []byte(key), instanceKeyAD)
		if err != nil {
			return fmt.Errorf("memory: instance settings: %w", err)
		}
		st.KeySealed = sealed
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if err := s.db.SetSetting(ctx, instanceSetting, string(b)); err != nil {
		return fmt.Errorf("memory: instance settings: %w", err)
	}
	s.apply(in.Instance, key)
	return nil
}

// testSample is what TestEmbeddings embeds: no user's text.
const testSample = "Atrium embeddings test: I prefer metric units."

// TestEmbeddings embeds a sample with the endpoint, model and key of in (nothing is
// saved) and returns the vector's width. The error is for the admin's page: an error
// answer's status and the start of its body (which the log never gets).
func (s *Service) TestEmbeddings(ctx context.Context, in InstanceInput) (int, error) {
	in = in.clean()
	if err := CheckInstance(in); err != nil {
		return 0, err
	}
	key, err := s.keyFor(in)
	if err != nil {
		return 0, err
	}
	emb, _ := newEmbedder(in.Instance, key)
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	vecs, err := emb.Embed(ctx, []string{testSample})
	if err != nil {
		var se *StatusError
		if errors.As(err, &se) {
			msg := "The endpoint answered " + se.Status
			if se.Body != "" {
				// Some endpoints echo the key they were sent; the page never shows it.
				body := se.Body
				if key != "" {
					body = strings.ReplaceAll(body, key, "[the API key]")
				}
				msg += ": " + body
			}
			return 0, errs.E(errs.Unavailable, "%s", msg)
		}
		return 0, errs.E(errs.Unavailable, "The endpoint failed: %s", strings.TrimPrefix(err.Error(), "memory: embeddings: "))
	}
	if len(vecs) != 1 || len(vecs[0]) == 0 {
		return 0, errs.E(errs.Unavailable, "The endpoint answered without a vector.")
	}
	if n := len(vecs[0]); n > MaxDims {
		return n, errs.E(errs.Invalid, "The model's vectors are %d wide; memory vectors hold at most %d. Set Dimensions to %d or less (if the model can shorten its vectors) or pick another model.", n, MaxDims, MaxDims)
	}
	return len(vecs[0]), nil
}
