package core

import "github.com/benbjohnson/clock"

// withDefaults fills c's zero fields.
func withDefaults(c Config) Config {
	if c.Clock == nil {
		c.Clock = clock.New()
	}
	if c.VisibilityTimeout == 0 {
		c.VisibilityTimeout = DefaultVisibilityTimeout
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.MaxQueue == 0 {
		c.MaxQueue = DefaultMaxQueue
	}
	return c
}
