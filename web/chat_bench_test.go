package web_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"atrium/web"
)

// BenchmarkOpenSession measures opening a long chat: GET /s/{id} on a session of
// 10,000 messages, end to end through the handler (login, ownership, the latest page
// of messages, markdown, the sidebar, the page template). The goal is ≤ 20 ms.
//
//	go test ./web -run x -bench OpenSession -benchtime 50x
func BenchmarkOpenSession(b *testing.B) {
	env := newTestEnv(b)
	admin := env.setup()
	id := admin.newSession()
	seedMessages(b, env.db, id, 10_000, 300)
	cookies := []*http.Cookie{admin.cookie(web.LoginCookie), admin.cookie(web.CSRFCookie)}
	h := env.srv.Handler()

	open := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/s/"+id, nil)
		for _, c := range cookies {
			req.AddCookie(c)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	rec := open()
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `id="msg-10000"`) || !strings.Contains(rec.Body.String(), `id="older"`) {
		b.Fatalf("GET /s/{id}: %d, %d bytes", rec.Code, rec.Body.Len())
	}
	for b.Loop() {
		if rec := open(); rec.Code != http.StatusOK {
			b.Fatalf("status %d", rec.Code)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/op")
}
