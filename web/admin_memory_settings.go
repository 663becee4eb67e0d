package web

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"atrium/internal/errs"
	"atrium/internal/memory"
	"atrium/internal/providers"
	"atrium/views"
)

// memoryInstanceView is the instance settings form as saved: f is the form to show
// (the saved settings when nil).
func (s *Server) memoryInstanceView(ctx context.Context, f *views.MemoryInstance) (views.MemoryInstance, error) {
	in := s.Memory.Instance()
	v := views.MemoryInstance{Enabled: in.Enabled, EmbeddingsURL: in.EmbeddingsURL, EmbeddingsModel: in.EmbeddingsModel,
		Dimensions: strconv.Itoa(in.EmbeddingsDimensions), HalfLifeDays: strconv.Itoa(in.HalfLifeDays),
		ForgetUnusedDays: strconv.Itoa(in.ForgetUnusedDays)}
	model := in.Model
	if f != nil {
		v, model = *f, f.Models[0].Value
	}
	v.KeySet = in.KeySet
	choices, err := s.Providers.Choices(ctx)
	if err != nil {
		return v, err
	}
	v.Models = []views.ModelOption{{Value: "", Label: "Each chat’s own model", Selected: model == ""}}
	for _, ch := range choices {
		v.Models = append(v.Models, views.ModelOption{Value: ch.Value, Label: ch.Label, Selected: ch.Value == model})
	}
	v.ModelMissing = in.Model != "" && !providers.HasChoice(choices, in.Model)
	v.Reindex = reindexView(s.Memory.ReindexStatus())
	return v, nil
}

func reindexView(st memory.ReindexStatus) views.ReindexStatus {
	return views.ReindexStatus{Stale: st.Stale, Running: st.Running, Done: st.Done, Total: st.Total, Err: st.Err}
}

// memoryInstanceInput reads the instance settings form: what the page shows again
// (never the key), and what the memory service checks. A number that is not one is
// an errs.Invalid naming its field.
func memoryInstanceInput(c echo.Context) (views.MemoryInstance, memory.InstanceInput, error) {
	f := views.MemoryInstance{Enabled: c.FormValue("enabled") == "on",
		EmbeddingsURL: strings.TrimSpace(c.FormValue("embeddings_url")), EmbeddingsModel: strings.TrimSpace(c.FormValue("embeddings_model")),
		Dimensions: strings.TrimSpace(c.FormValue("embeddings_dimensions")), HalfLifeDays: strings.TrimSpace(c.FormValue("half_life_days")),
		ForgetUnusedDays: strings.TrimSpace(c.FormValue("forget_unused_days")),
		// The chosen model rides in Models[0] until the view fills the list.
		Models: []views.ModelOption{{Value: strings.TrimSpace(c.FormValue("model"))}}}
	in := memory.InstanceInput{Instance: memory.Instance{Enabled: f.Enabled, Model: f.Models[0].Value,
		EmbeddingsURL: f.EmbeddingsURL, EmbeddingsModel: f.EmbeddingsModel},
		APIKey: c.FormValue("embeddings_key"), ClearKey: c.FormValue("clear_key") == "on"}
	for _, n := range []struct {
		label, text string
		empty       int // the value of an empty field
		into        *int
	}{
		{"Dimensions", f.Dimensions, 0, &in.EmbeddingsDimensions},
		{"Half-life", f.HalfLifeDays, -1, &in.HalfLifeDays},
		{"Forget unused memories", f.ForgetUnusedDays, 0, &in.ForgetUnusedDays},
	} {
		if n.text == "" && n.empty >= 0 {
			*n.into = n.empty
			continue
		}
		v, err := strconv.Atoi(n.text)
		if err != nil {
			return f, in, errs.E(errs.Invalid, "%s: %q is not a whole number.", n.label, n.text)
		}
		*n.into = v
	}
	return f, in, nil
}

// checkMemoryModel refuses a memory model that is not one of the configured models.
func (s *Server) checkMemoryModel(ctx context.Context, choice string) error {
	if choice == "" {
		return nil
	}
	choices, err := s.Providers.Choices(ctx)
	if err != nil {
		return err
	}
	if !providers.HasChoice(choices, choice) {
		return errs.E(errs.Invalid, "Memory model: pick one of the configured models, or each chat’s own.")
	}
	return nil
}

// renderMemoryInstance shows the page with the form as submitted.
func (s *Server) renderMemoryInstance(c echo.Context, status int, f views.MemoryInstance) error {
	ctx := c.Request().Context()
	v, err := s.adminMemoriesView(ctx)
	if err != nil {
		return err
	}
	if v.Instance, err = s.memoryInstanceView(ctx, &f); err != nil {
		return err
	}
	return render(c, status, views.AdminMemoriesPage(s.page(c, "Memories of all users"), v))
}

// saveMemoryInstance saves the instance memory settings; a new embedder takes effect
// at once and the vectors are rebuilt in the background. A bad value changes nothing.
func (s *Server) saveMemoryInstance(c echo.Context) error {
	ctx := c.Request().Context()
	f, in, err := memoryInstanceInput(c)
	if err == nil {
		err = s.checkMemoryModel(ctx, in.Model)
	}
	before := s.Memory.EmbedderName()
	if err == nil {
		err = s.Memory.SetInstance(ctx, in)
	}
	if err != nil {
		if errs.Code(err) != errs.Invalid {
			return err
		}
		f.Error = errs.Message(err)
		return s.renderMemoryInstance(c, http.StatusBadRequest, f)
	}
	notice := "Memory settings saved."
	if s.Memory.EmbedderName() != before {
		notice += " Every memory is being indexed again for the new embedder; until then search finds exact words only."
	}
	return adminMemoriesDone(c, notice)
}

// testMemoryEmbeddings embeds a sample with the form's endpoint, model and key
// (the stored key when none is typed) and shows the width or the error; nothing is
// saved, and the error is shown to the admin, never logged.
func (s *Server) testMemoryEmbeddings(c echo.Context) error {
	f, in, err := memoryInstanceInput(c)
	if err == nil {
		f.TestWidth, err = s.Memory.TestEmbeddings(c.Request().Context(), in)
	}
	if err != nil {
		if code := errs.Code(err); code != errs.Invalid && code != errs.Unavailable {
			return err
		}
		f.TestWidth, f.TestError = 0, errs.Message(err)
	}
	return s.renderMemoryInstance(c, http.StatusOK, f)
}

// memoryReindexStatus is the reindex progress fragment the page polls.
func (s *Server) memoryReindexStatus(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "no-store")
	return render(c, http.StatusOK, views.ReindexProgress(reindexView(s.Memory.ReindexStatus())))
}
