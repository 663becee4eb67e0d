package tools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"testing"

	"atrium/internal/store/storetest"
	"atrium/internal/tools"
)

// topics are 40 tools about different things, described the way tools are.
var topics = []struct{ name, use, does, params string }{
	{"weather_forecast", "the user asks about the weather, temperature, rain or wind, today or in the coming days", "returns the weather forecast for a city", "city, day"},
	{"calendar_events", "the user asks about meetings, appointments or their schedule", "lists calendar events in a date range", "from, to"},
	{"send_email", "the user wants to write or send an email message", "sends an email to recipients", "to, subject, body"},
	{"read_file", "the user asks for the contents of a document in their files folder", "reads a text file", "path"},
	{"solve_equation", "the user asks to solve an algebra equation for an unknown variable", "solves equations symbolically", "equation, variable"},
	{"translate_text", "the user wants text translated into another language", "translates text between languages", "text, target_language"},
	{"stock_quote", "the user asks about a share price or the stock market", "returns the latest stock quote for a ticker", "ticker"},
	{"news_headlines", "the user asks what is in the news or about current events", "returns top news headlines", "topic"},
	{"driving_directions", "the user asks how to get somewhere by car, bike or on foot", "returns a route with turn-by-turn directions", "origin, destination"},
	{"flight_search", "the user wants to find or compare airline flights", "searches flights between airports", "from, to, date"},
	{"hotel_booking", "the user wants a hotel room or accommodation", "searches and books hotels", "city, check_in, nights"},
	{"recipe_finder", "the user asks for a recipe or what to cook with some ingredients", "finds cooking recipes", "ingredients"},
	{"music_player", "the user wants to play a song, album or playlist", "controls music playback", "song"},
	{"set_reminder", "the user wants to be reminded of something later", "creates a reminder notification", "text, at"},
	{"countdown_timer", "the user wants a kitchen timer or countdown", "starts a countdown timer", "seconds"},
	{"contact_lookup", "the user asks for someone's phone number or address book entry", "looks up a contact", "name"},
	{"note_taking", "the user wants to jot down or keep a note", "saves a note", "text"},
	{"web_search", "the answer needs information from the internet", "searches the web", "query"},
	{"encyclopedia", "the user asks for background knowledge about a person, place or concept", "returns an encyclopedia summary", "title"},
	{"currency_converter", "the user wants to convert money between currencies such as euros and dollars", "converts currency amounts at today's exchange rate", "amount, from, to"},
	{"unit_converter", "the user wants to convert lengths, weights or volumes between units", "converts measurement units", "value, from_unit, to_unit"},
	{"image_generator", "the user wants a picture or illustration drawn", "generates an image from a prompt", "prompt"},
	{"spreadsheet_editor", "the user wants to change cells in a spreadsheet", "edits spreadsheet cells", "sheet, cell, value"},
	{"todo_list", "the user wants to add or check off items on a to-do list", "manages a to-do list", "item"},
	{"smart_lights", "the user wants to switch lamps on or off or dim the lights", "controls smart home lighting", "room, brightness"},
	{"package_tracking", "the user asks where a parcel or delivery is", "tracks a shipment by tracking number", "tracking_number"},
	{"restaurant_reservation", "the user wants to reserve a table at a restaurant", "books a restaurant table", "restaurant, party_size, time"},
	{"ride_hailing", "the user wants a taxi or a ride", "orders a car ride", "pickup, dropoff"},
	{"fitness_tracker", "the user asks about their steps, workouts or heart rate", "returns activity statistics", "period"},
	{"sleep_log", "the user asks how well they slept", "returns sleep duration and quality", "night"},
	{"podcast_search", "the user wants to find a podcast episode", "searches podcasts", "query"},
	{"movie_showtimes", "the user wants to see a film at the cinema", "lists movie showtimes at nearby cinemas", "movie, city"},
	{"sports_scores", "the user asks about a match result or league table", "returns sports scores", "team"},
	{"dictionary", "the user asks what a word means or how to spell it", "returns word definitions", "word"},
	{"qr_code", "the user wants a QR code for a link", "renders a QR code", "content"},
	{"password_generator", "the user needs a strong random password", "generates passwords", "length"},
	{"zip_archive", "the user wants to compress files into an archive", "creates zip archives", "paths"},
	{"pdf_reader", "the user asks about the content of a PDF document", "extracts text from PDF pages", "path, pages"},
	{"github_issues", "the user asks about bugs or issues in a code repository", "lists GitHub issues", "repo, state"},
	{"crypto_prices", "the user asks about bitcoin or other cryptocurrency prices", "returns cryptocurrency prices", "coin"},
}

func topicTool(i int) tools.Tool {
	tp := topics[i]
	t := echoTool(tp.name)
	t.Description = fmt.Sprintf("When to use: %s. What it does: %s. Parameters: %s.", tp.use, tp.does, tp.params)
	t.Schema = json.RawMessage(`{"type":"object"}`)
	return t
}

// countingEmbedder counts the texts it embeds.
type countingEmbedder struct {
	tools.HashEmbedder
	n atomic.Int64
}

func (c *countingEmbedder) Embed(text string) []float32 {
	c.n.Add(1)
	return c.HashEmbedder.Embed(text)
}

func TestSelectAllWhenFew(t *testing.T) {
	db := storetest.Open(t)
	emb := &countingEmbedder{}
	r := tools.NewRegistry(db, emb)
	for i := range 20 {
		mustRegister(t, r, topicTool(i))
	}
	got, sel, err := r.Select(context.Background(), "what's the weather in Paris tomorrow", nil, 20)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 20 || sel.Reason != tools.ReasonAll || len(sel.Offered) != 20 || sel.Scores != nil {
		t.Errorf("got %d tools, selection %+v", len(got), sel)
	}
	if emb.n.Load() != 0 {
		t.Errorf("embedded %d texts for a selection that needs none", emb.n.Load())
	}

	// Without a database every enabled tool is offered however many there are.
	r = tools.NewRegistry(nil, tools.HashEmbedder{})
	for i := range topics {
		mustRegister(t, r, topicTool(i))
	}
	got, sel, err = r.Select(context.Background(), "weather", nil, 0)
	if err != nil || len(got) != 40 || sel.Reason != tools.ReasonAll {
		t.Errorf("no db: %d tools, %+v, %v", len(got), sel, err)
	}
}

func TestSelectBySimilarity(t *testing.T) {
	db := storetest.Open(t)
	ctx := context.Background()
	emb := &countingEmbedder{}
	r := tools.NewRegistry(db, emb)
	for i := range topics {
		mustRegister(t, r, topicTool(i))
	}
	if err := r.SetEnabled("encyclopedia", false); err != nil {
		t.Fatal(err)
	}

	queries := []struct{ query, want, unrelated string }{
		{"what's the weather in Paris tomorrow", "weather_forecast", "zip_archive"},
		{"Book me a flight from Berlin to Rome on Friday", "flight_search", "sleep_log"},
		{"how many dollars is 50 euros", "currency_converter", "smart_lights"},
		{"turn off the lights in the kitchen", "smart_lights", "stock_quote"},
	}
	for _, q := range queries {
		t.Run(q.query, func(t *testing.T) {
			got, sel, err := r.Select(ctx, q.query, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			if sel.Reason != tools.ReasonSimilarity || len(got) != 20 || len(sel.Offered) != 20 || len(sel.Scores) != 20 {
				t.Fatalf("got %d tools, selection %+v", len(got), sel)
			}
			if !slices.IsSorted(sel.Offered) || got[0].Name != sel.Offered[0] {
				t.Errorf("offered not sorted by name / not matching tools: %v", sel.Offered)
			}
			best := ""
			for name, s := range sel.Scores {
				if best == "" || s > sel.Scores[best] || s == sel.Scores[best] && name < best {
					best = name
				}
			}
			if best != q.want {
				t.Errorf("best match %s (%.3f), want %s (%.3f)", best, sel.Scores[best], q.want, sel.Scores[q.want])
			}
			if s, ok := sel.Scores[q.unrelated]; ok && s >= sel.Scores[q.want] {
				t.Errorf("unrelated %s scored %.3f >= %.3f", q.unrelated, s, sel.Scores[q.want])
			}
			if slices.Contains(sel.Offered, "encyclopedia") {
				t.Error("a disabled tool was offered")
			}
		})
	}
	t.Logf("scores for the weather query: %v", func() map[string]float64 {
		_, sel, _ := r.Select(ctx, queries[0].query, nil, 0)
		return sel.Scores
	}())

	t.Run("recent tools are added", func(t *testing.T) {
		recent := []string{"zip_archive", "qr_code", "zip_archive", "encyclopedia", "no_such_tool"}
		got, sel, err := r.Select(ctx, "what's the weather in Paris tomorrow", recent, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"weather_forecast", "zip_archive", "qr_code"} {
			if !slices.Contains(sel.Offered, want) {
				t.Errorf("%s not offered: %v", want, sel.Offered)
			}
		}
		if slices.Contains(sel.Offered, "encyclopedia") || slices.Contains(sel.Offered, "no_such_tool") {
			t.Errorf("offered a disabled or unknown tool: %v", sel.Offered)
		}
		if len(got) > 20+len(recent) || len(got) < 20 || len(got) != len(sel.Offered) {
			t.Errorf("%d tools offered", len(got))
		}
		seen := map[string]bool{}
		for _, n := range sel.Offered {
			if seen[n] {
				t.Errorf("%s offered twice", n)
			}
			seen[n] = true
		}
	})

	t.Run("descriptions are embedded once", func(t *testing.T) {
		// 39 enabled descriptions + 1 query per Select so far.
		if n := emb.n.Load(); n != 39+int64(len(queries))+2 {
			t.Errorf("embedded %d texts", n)
		}
		// A new process: the same tools again do not need embedding.
		emb2 := &countingEmbedder{}
		r2 := tools.NewRegistry(db, emb2)
		for i := range topics {
			mustRegister(t, r2, topicTool(i))
		}
		r2.SetEnabled("encyclopedia", false) // as in r: never stored
		if _, _, err := r2.Select(ctx, "weather", nil, 0); err != nil {
			t.Fatal(err)
		}
		if n := emb2.n.Load(); n != 1 {
			t.Errorf("re-registering unchanged tools embedded %d texts, want 1 (the query)", n)
		}
		// A changed description is embedded again, and its new text counts.
		r2.Unregister("sleep_log")
		changed := topicTool(29)
		changed.Description = "When to use: the user asks about the weather forecast, rain and temperature in a city. What it does: weather. Parameters: city."
		mustRegister(t, r2, changed)
		_, sel, err := r2.Select(ctx, "weather forecast rain", nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		if n := emb2.n.Load(); n != 3 {
			t.Errorf("after one change: %d texts embedded, want 3", n)
		}
		if sel.Scores["sleep_log"] < 0.3 {
			t.Errorf("changed description not used: %v", sel.Scores)
		}
	})
}

func TestHashEmbedder(t *testing.T) {
	var e tools.HashEmbedder
	a := e.Embed("What's the Weather in Paris tomorrow?")
	b := e.Embed("what's the weather in paris TOMORROW")
	if e.Dim() != 256 || len(a) != 256 || !slices.Equal(a, b) {
		t.Fatalf("dim %d, len %d, case-insensitive and deterministic: %v", e.Dim(), len(a), slices.Equal(a, b))
	}
	var norm float64
	for _, x := range a {
		norm += float64(x) * float64(x)
	}
	if math.Abs(norm-1) > 1e-5 {
		t.Errorf("norm² %v", norm)
	}
	if z := e.Embed("  ?! "); slices.ContainsFunc(z, func(x float32) bool { return x != 0 }) {
		t.Error("no words should give the zero vector")
	}
	cos := func(x, y []float32) (s float64) {
		for i := range x {
			s += float64(x[i]) * float64(y[i])
		}
		return s
	}
	near, far := e.Embed("weather forecast for Paris"), e.Embed("compress files into a zip archive")
	if cos(a, near) <= cos(a, far) {
		t.Errorf("cos(query, weather) %.3f <= cos(query, zip) %.3f", cos(a, near), cos(a, far))
	}
}
