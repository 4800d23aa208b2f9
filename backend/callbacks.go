package backend

import "sync"

// Callbacks keeps the functions registered with a backend's OnAppend and
// calls them; both backends embed one instead of each keeping its own list.
// The zero value is ready to use.
type Callbacks struct {
	mu  sync.Mutex
	fns []func(boundary string)
}

// Add registers fn; nil is ignored.
func (c *Callbacks) Add(fn func(boundary string)) {
	if fn == nil {
		return
	}
	c.mu.Lock()
	c.fns = append(c.fns, fn)
	c.mu.Unlock()
}

// Notify calls every registered function once per boundary. The lock is not
// held while they run, so a callback may register another.
func (c *Callbacks) Notify(boundaries ...string) {
	if len(boundaries) == 0 {
		return
	}
	c.mu.Lock()
	fns := c.fns
	c.mu.Unlock()
	for _, b := range boundaries {
		for _, fn := range fns {
			fn(b)
		}
	}
}
