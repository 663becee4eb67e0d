package tools

import "time"

// SetTimeoutForTest overrides a registered tool's timeout without Register's
// 10s–30s bounds, so that timeout tests run in milliseconds.
func (r *Registry) SetTimeoutForTest(name string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.tools[name]; ok {
		if e.tool.MaxRun == e.tool.Timeout { // not extended by progress: stays so
			e.tool.MaxRun = d
		}
		e.tool.Timeout = d
	}
}
