package sqsleasebus

import "context"

// AwaitMoves waits until no dead-letter move of s runs in the background
// (a last attempt's lease that expired, a message that does not decode).
func AwaitMoves[T any](ctx context.Context, s *Subscription[T]) error { return s.awaitMoves(ctx) }

// AcksWaiting returns how many Acks wait for the delete in flight.
func AcksWaiting[T any](s *Subscription[T]) int {
	s.acks.mu.Lock()
	defer s.acks.mu.Unlock()
	return len(s.acks.queue)
}
