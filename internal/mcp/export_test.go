package mcp

import "time"

// ChildPID returns the pid of the stdio child of the server called name while
// it is ready, else 0. Tests kill it to simulate a crash.
func (s *Supervisor) ChildPID(name string) int {
	s.mu.Lock()
	srv := s.servers[name]
	s.mu.Unlock()
	if srv == nil {
		return 0
	}
	c, _ := srv.readyConn()
	if c == nil {
		return 0
	}
	return c.pgid
}

// InFlight is the number of the server's tool calls sent and not yet answered.
func (s *Supervisor) InFlight(name string) int {
	s.mu.Lock()
	srv := s.servers[name]
	s.mu.Unlock()
	if srv == nil {
		return 0
	}
	return int(srv.calls.Load())
}

// ConnectTimings says where the start-up time of the server's last connection that
// got ready went: starting (the process, or connecting), initialize, and listing.
func (s *Supervisor) ConnectTimings(name string) (start, initialize, list time.Duration) {
	s.mu.Lock()
	srv := s.servers[name]
	s.mu.Unlock()
	if srv == nil {
		return 0, 0, 0
	}
	if t := srv.timings.Load(); t != nil {
		return t.Start, t.Initialize, t.List
	}
	return 0, 0, 0
}
