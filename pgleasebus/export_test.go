package pgleasebus

// Changed returns a channel closed at the next change this process sees
// on s's topic (a publish, a settle, a NOTIFY): a test reads state after
// taking it, and waits on it while the state is not yet what it wants.
func (s *Subscription[T]) Changed() <-chan struct{} {
	ch, _ := s.w.channel()
	return ch
}
