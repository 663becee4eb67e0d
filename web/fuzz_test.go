package web_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// FuzzChatFrames sends arbitrary frames, text or binary, over a real chat websocket:
// the server must answer each one in order and keep the connection open (a bad frame
// gets a notice, never a panic or a dropped socket). After each frame a ping goes out;
// its pong, which the server sends only after it has handled the frame before it, ends
// the round.
func FuzzChatFrames(f *testing.F) {
	for _, s := range []string{
		`{"type":"send","text":"hello"}`, `{"type":"stop"}`, `{"type":"x"}`, `{}`, `[]`, `null`, ``, `{`,
		`{"type":"send","text":"a","attach":"srv\nfile:///etc/passwd"}`, `{"type":"send","attach":["a\nb",1]}`,
		`{"type":"send","text":"\u0000\u202e"}`, `{"type":"send","attach":{"x":1}}`, "\xff\xfe", `{"type":1}`,
		`{"HEADERS":{"X-CSRF-Token":"x"},"type":"stop"}`,
	} {
		f.Add(true, []byte(s))
	}
	f.Add(false, []byte(`{"type":"stop"}`))
	env := newTestEnv(f)
	admin := env.setup()
	id := admin.newSession()
	var conn *websocket.Conn
	pong := make(chan struct{}, 1)
	dial := func(t *testing.T) {
		if conn != nil {
			return
		}
		c, _, err := admin.dialOrigin(id, env.ts.URL)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		c.SetPongHandler(func(string) error { pong <- struct{}{}; return nil })
		// The client must read for control frames to be handled.
		go func() {
			for {
				if _, _, err := c.NextReader(); err != nil {
					return
				}
			}
		}()
		conn = c
	}
	f.Cleanup(func() {
		if conn != nil {
			conn.Close()
		}
	})
	f.Fuzz(func(t *testing.T, text bool, frame []byte) {
		dial(t)
		kind := websocket.BinaryMessage
		if text {
			kind = websocket.TextMessage
		}
		if err := conn.WriteMessage(kind, frame); err != nil {
			t.Fatalf("write: %v", err)
		}
		if err := conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(5*time.Second)); err != nil {
			t.Fatalf("the server closed the socket after %q: %v", frame, err)
		}
		select {
		case <-pong:
		case <-time.After(10 * time.Second):
			conn.Close()
			conn = nil
			t.Fatalf("no answer after the frame %q (text %v)", frame, text)
		}
		if strings.Contains(string(frame), `"send"`) {
			// A send may start a reply (there is no model here, so it fails at once);
			// let it end before the next frame, so that frames do not queue up.
			time.Sleep(time.Millisecond)
		}
	})
}
