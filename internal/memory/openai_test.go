package memory

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestOpenAIEmbedder(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model string   `json:"model"`
			Input []string `json:"input"`
		}
		if r.URL.Path != "/v1/embeddings" || r.Header.Get("Authorization") != "Bearer k" || json.NewDecoder(r.Body).Decode(&req) != nil || req.Model != "m" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		// Answer out of order: the client must place vectors by index.
		w.Write([]byte(`{"data":[{"index":1,"embedding":[0,1]},{"index":0,"embedding":[1,0]}]}`))
	}))
	defer srv.Close()
	e := &OpenAIEmbedder{BaseURL: srv.URL + "/v1/", APIKey: "k", Model: "m"}
	vecs, err := e.Embed(context.Background(), []string{"a", "b"})
	if err != nil || len(vecs) != 2 || vecs[0][0] != 1 || vecs[1][1] != 1 {
		t.Fatalf("Embed = %v, %v", vecs, err)
	}
	if _, err := (&OpenAIEmbedder{BaseURL: srv.URL + "/v1", Model: "m"}).Embed(context.Background(), []string{"a"}); err == nil {
		t.Fatal("an error status was accepted")
	}
	if _, err := e.Embed(context.Background(), []string{"a"}); err == nil {
		t.Fatal("two vectors for one text were accepted")
	}
}
