package web

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// clientIP is the address of the client, for rate limits and logs: the connection's
// peer, unless the peer is one of the trusted proxies (ATRIUM_TRUSTED_PROXIES); then
// X-Forwarded-For is read from the right, skipping trusted proxies, and the first other
// address is the client's. Whatever a client writes in front of the entries its proxies
// appended is never taken, and without trusted proxies the header is ignored.
func (s *Server) clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil || !s.trusted(peer) {
		return host
	}
	client := peer
	hops := r.Header.Values("X-Forwarded-For")
	for i := len(hops) - 1; i >= 0; i-- {
		parts := strings.Split(hops[i], ",")
		for j := len(parts) - 1; j >= 0; j-- {
			a, err := netip.ParseAddr(strings.TrimSpace(parts[j]))
			if err != nil {
				return client.String() // garbage: the last address a proxy vouched for
			}
			client = a.Unmap()
			if !s.trusted(client) {
				return client.String()
			}
		}
	}
	return client.String()
}

func (s *Server) trusted(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range s.Config.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
