package web

import (
	"context"
	"sync"
	"time"

	"atrium/internal/auth"
	"atrium/internal/errs"
	"atrium/internal/store"
	"atrium/views"
)

// This file is how ending a login ends its access over websockets: every open socket
// is registered with its user and login, so that a logout, a password reset, a
// disable, a deletion or a demotion closes the sockets it ends at once. Another
// process sharing the database cannot reach this registry, so each chat send
// re-checks the login, and each socket re-checks it every loginRecheck.

// loginRecheck is how often an open socket re-checks its login (and its role, for an
// admin socket) in the database.
const loginRecheck = 25 * time.Second

// msgLoginEnded is shown in a chat whose socket was closed because its login ended.
const msgLoginEnded = "Your login has ended. Log in again to continue; nothing was sent."

// socketOwner is whose a registered socket is.
type socketOwner struct {
	user  int64
	login string // the hash of the login token, as stored
	admin bool   // an admin-only socket (Settings → MCP): a demotion closes it
	chat  bool   // a chat page's socket: it shows why it was closed
}

// sockets is every open websocket of this process, by client.
type sockets struct {
	mu   sync.Mutex
	open map[*client]socketOwner
}

func (r *sockets) add(cl *client, o socketOwner) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.open == nil {
		r.open = map[*client]socketOwner{}
	}
	r.open[cl] = o
}

func (r *sockets) remove(cl *client) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.open, cl)
}

// end closes one registered socket (its login ended).
func (r *sockets) end(cl *client) {
	r.mu.Lock()
	o, ok := r.open[cl]
	delete(r.open, cl)
	r.mu.Unlock()
	if ok {
		endSocket(cl, o)
	} else {
		cl.close()
	}
}

// closeWhere closes every socket whose owner matches.
func (r *sockets) closeWhere(match func(socketOwner) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for cl, o := range r.open {
		if match(o) {
			delete(r.open, cl)
			endSocket(cl, o)
		}
	}
}

// endSocket tells a chat why (the frame goes out before the close frame) and closes
// the client. The close code (1001) is one htmx-ext-ws does not reconnect after.
func endSocket(cl *client, o socketOwner) {
	if o.chat {
		select {
		case cl.send <- renderFrame(views.FrameNotice(msgLoginEnded)):
		default:
		}
	}
	cl.close()
}

// endLoginSockets closes the sockets of one login (a logout): the user's other
// browsers keep theirs.
func (s *Server) endLoginSockets(token string) {
	hash := string(auth.HashToken(token))
	s.sockets.closeWhere(func(o socketOwner) bool { return o.login == hash })
}

// endUserSockets closes every socket of a user whose logins all ended (password
// reset, disable, deletion).
func (s *Server) endUserSockets(userID int64) {
	s.sockets.closeWhere(func(o socketOwner) bool { return o.user == userID })
}

// endAdminSockets closes a demoted user's admin-only sockets; their chats stay open.
func (s *Server) endAdminSockets(userID int64) {
	s.sockets.closeWhere(func(o socketOwner) bool { return o.user == userID && o.admin })
}

// openSocket registers cl for the request's login and re-checks the login at once
// (it may have ended between the request's check and the registration) and then
// every loginRecheck until cl closes. The returned func unregisters it.
func (s *Server) openSocket(token string, u store.User, cl *client, admin, chat bool) (done func()) {
	o := socketOwner{user: u.ID, login: string(auth.HashToken(token)), admin: admin, chat: chat}
	s.sockets.add(cl, o)
	go func() {
		t := time.NewTicker(s.loginRecheck)
		defer t.Stop()
		for {
			_, err := s.liveLogin(context.Background(), token, admin)
			if errs.Is(err, errs.Unauthorized) {
				s.sockets.end(cl)
				return
			}
			if err != nil {
				s.Log.Warn("web: re-checking a socket's login", "err", err)
			}
			select {
			case <-cl.closed:
				return
			case <-t.C:
			}
		}
	}()
	return func() { s.sockets.remove(cl) }
}

// liveLogin returns the user of token while it is a live login (of an admin, when
// admin is set); an ended login or a lost role is errs.Unauthorized. Any other error
// is the database's: it does not end the socket, as a busy moment must not log
// everyone out.
func (s *Server) liveLogin(ctx context.Context, token string, admin bool) (store.User, error) {
	u, _, err := s.logins.Current(ctx, token)
	if err != nil {
		return store.User{}, err
	}
	if admin && u.Role != store.RoleAdmin {
		return store.User{}, errs.E(errs.Unauthorized, "Only admins can do this.")
	}
	return u, nil
}
