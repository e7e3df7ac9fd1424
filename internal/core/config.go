package core

import (
	"math"

	"github.com/benbjohnson/clock"
)

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

// ValidateConfig reports the first out-of-range field, as an error matching
// ErrInvalidArgument.
func ValidateConfig(c Config) error {
	switch {
	case c.VisibilityTimeout < 0:
		return Invalid("VisibilityTimeout = %v, must be > 0", c.VisibilityTimeout)
	case c.MaxAttempts < 0 && c.MaxAttempts != UnlimitedAttempts:
		return Invalid("MaxAttempts = %d, must be >= 1 or UnlimitedAttempts", c.MaxAttempts)
	case c.MaxQueue < 0:
		return Invalid("MaxQueue = %d, must be >= 1", c.MaxQueue)
	case c.Overflow > OverflowDropOldest:
		return Invalid("Overflow = %v, not a policy", c.Overflow)
	case c.MaxInFlight < 0:
		return Invalid("MaxInFlight = %d, must be >= 1 (or 0 for no cap)", c.MaxInFlight)
	case c.TTL < 0:
		return Invalid("TTL = %v, must be >= 0", c.TTL)
	}
	return ValidateRetry(c.Retry)
}

// ValidateRetry reports the first out-of-range field, as an error matching
// ErrInvalidArgument.
func ValidateRetry(p RetryPolicy) error {
	switch {
	case p.Initial < 0:
		return Invalid("RetryPolicy.Initial = %v, must be >= 0", p.Initial)
	case p.Max < 0:
		return Invalid("RetryPolicy.Max = %v, must be >= 0", p.Max)
	case p.Multiplier != 0 && (p.Multiplier < 1 || math.IsNaN(p.Multiplier) || math.IsInf(p.Multiplier, 0)):
		return Invalid("RetryPolicy.Multiplier = %v, must be >= 1 and finite (or 0 for the default)", p.Multiplier)
	case p.Jitter < 0 || p.Jitter > 1 || math.IsNaN(p.Jitter):
		return Invalid("RetryPolicy.Jitter = %v, must be in [0, 1]", p.Jitter)
	case p.Initial > 0 && p.Max > 0 && p.Initial > p.Max:
		return Invalid("RetryPolicy.Initial = %v exceeds Max = %v", p.Initial, p.Max)
	}
	return nil
}

// ValidPriority reports whether p is one of the four priorities.
func ValidPriority(p Priority) bool { return p >= PriorityLow && p <= PriorityCritical }
