package mcp

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
