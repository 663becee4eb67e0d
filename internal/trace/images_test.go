package trace_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"atrium/internal/llm"
	"atrium/internal/store"
	"atrium/internal/trace"
)

// A model_request span keeps a request only as its wire body; the request as built
// gets its images back from it (OpenAI data: URLs, Anthropic base64 blocks), with their
// messages, so a replay to the other format sends the same images.
func TestRebuiltRequestGetsImagesFromTheBody(t *testing.T) {
	urls := map[string]string{"openai": "http://x/v1/chat/completions", "anthropic": "http://x/v1/messages"}
	bodies := map[string]string{
		"openai": `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AQI="}},{"type":"text","text":"a"}]},` +
			`{"role":"assistant","content":"ok"},{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,AwQ="}},` +
			`{"type":"image_url","image_url":{"url":"data:image/gif;base64,BQY="}},{"type":"text","text":"b"}]}]}`,
		"anthropic": `{"messages":[{"content":[{"source":{"data":"AQI=","media_type":"image/png","type":"base64"},"type":"image"},{"text":"a","type":"text"}],"role":"user"},` +
			`{"content":[{"text":"ok","type":"text"}],"role":"assistant"},{"content":[{"source":{"data":"AwQ=","media_type":"image/jpeg","type":"base64"},"type":"image"},` +
			`{"source":{"data":"BQY=","media_type":"image/gif","type":"base64"},"type":"image"},{"text":"b","type":"text"}],"role":"user"}],"model":"m"}`,
	}
	for name, body := range bodies {
		data, err := json.Marshal(trace.ModelRequest{HTTP: &llm.HTTPRequest{Method: "POST", URL: urls[name], Body: body}})
		if err != nil {
			t.Fatal(err)
		}
		reqs, err := trace.RebuildLLMRequests([]store.SpanInfo{{Seq: 1, Kind: trace.KindModelRequest, Data: data}})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		m := reqs[0].Messages
		if !bytes.Equal(m[0].Images[0].Data, []byte{1, 2}) || !bytes.Equal(m[2].Images[0].Data, []byte{3, 4}) ||
			!bytes.Equal(m[2].Images[1].Data, []byte{5, 6}) || m[2].Images[1].MediaType != "image/gif" {
			t.Errorf("%s: rebuilt images = %+v", name, m)
		}
		if m[0].Content != "a" || m[2].Content != "b" || len(m[0].Images) != 1 || m[0].Images[0].MediaType != "image/png" {
			t.Errorf("%s: rebuilt messages = %+v", name, m)
		}
	}
}
