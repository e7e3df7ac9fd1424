package core

import (
	"fmt"

	"github.com/benbjohnson/clock"
	"github.com/leasebus/leasebus/queue"
)

// withDefaults fills c's zero fields.
func withDefaults(c queue.Config) queue.Config {
	if c.Clock == nil {
		c.Clock = clock.New()
	}
	if c.VisibilityTimeout == 0 {
		c.VisibilityTimeout = queue.DefaultVisibilityTimeout
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = queue.DefaultMaxAttempts
	}
	if c.MaxQueue == 0 {
		c.MaxQueue = queue.DefaultMaxQueue
	}
	if c.KeyConcurrency == 0 {
		c.KeyConcurrency = queue.DefaultKeyConcurrency
	}
	return c
}

// ValidateConfig reports the first out-of-range field, as an error matching
// ErrInvalidArgument.
func ValidateConfig(c queue.Config) error {
	switch {
	case c.VisibilityTimeout < 0:
		return invalid("VisibilityTimeout = %v, must be > 0", c.VisibilityTimeout)
	case c.MaxAttempts < 0 && c.MaxAttempts != queue.UnlimitedAttempts:
		return invalid("MaxAttempts = %d, must be >= 1 or UnlimitedAttempts", c.MaxAttempts)
	case c.MaxQueue < 0:
		return invalid("MaxQueue = %d, must be >= 1", c.MaxQueue)
	case c.Overflow > queue.OverflowDropOldest:
		return invalid("Overflow = %v, not a policy", c.Overflow)
	case c.MaxInFlight < 0:
		return invalid("MaxInFlight = %d, must be >= 1 (or 0 for no cap)", c.MaxInFlight)
	case c.TTL < 0:
		return invalid("TTL = %v, must be >= 0", c.TTL)
	case c.KeyConcurrency < 0:
		return invalid("KeyConcurrency = %d, must be >= 1 (or 0 for the default)", c.KeyConcurrency)
	}
	if err := c.RateLimit.Validate(); err != nil {
		return fmt.Errorf("RateLimit: %w", err)
	}
	if err := c.KeyRateLimit.Validate(); err != nil {
		return fmt.Errorf("KeyRateLimit: %w", err)
	}
	return c.Retry.Validate()
}

// ValidPriority reports whether p is one of the four priorities.
func ValidPriority(p queue.Priority) bool {
	return p >= queue.PriorityLow && p <= queue.PriorityCritical
}
