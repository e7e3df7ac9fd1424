// Package durabilitylab holds two throw-away prototype stores for the
// "crash-durable local mode" design note (../DURABILITY.md): an append-only
// CRC32C journal of our own (Journal) and a go.etcd.io/bbolt store (Bolt).
// Both implement Store; neither is wired into the broker.
package durabilitylab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Mode is when a store fsyncs.
type Mode int

const (
	// SyncEach fsyncs before every call returns.
	SyncEach Mode = iota
	// SyncGroup makes callers wait for a shared flush (one fsync per window).
	SyncGroup
	// SyncNone writes (write(2) / mmap-free bbolt tx) but never fsyncs.
	SyncNone
)

func (m Mode) String() string {
	return [...]string{"sync-each", "group", "none"}[m]
}

// GroupWindow is the minimum interval between the starts of two journal
// group-commit fsyncs. 0 (the default, the best measured) means: flush as
// soon as the previous fsync is done; the batch is whatever arrived during it.
var GroupWindow time.Duration

// BoltBatchDelay is bbolt's MaxBatchDelay in SyncGroup mode (1 ms measured
// better than 0 on W2).
var BoltBatchDelay = time.Millisecond

// Msg is the persisted state of one message of one subscription.
type Msg struct {
	Seq       uint64
	Priority  int8
	Key       string
	Payload   []byte
	Attempts  uint32
	NotBefore int64 // unix ns on the injected clock; 0 = visible
	// dead-letter fields (Dead == true: in the dead-letter store, not live)
	Dead    bool
	Reason  string
	LastErr string
}

// State is everything recovered on open.
type State struct {
	Live map[uint64]*Msg
	Dead map[uint64]*Msg
	// TruncatedBytes is how much torn/corrupt tail was cut off (journal only).
	TruncatedBytes int64
}

func newState() *State {
	return &State{Live: map[uint64]*Msg{}, Dead: map[uint64]*Msg{}}
}

// Store is the interface both prototypes implement.
type Store interface {
	Publish(m *Msg) error
	PublishBatch(ms []*Msg) error
	Ack(seqs ...uint64) error
	// Deliver records the attempt number at delivery time (see DURABILITY.md).
	Deliver(seq uint64, attempt uint32) error
	// Nack records a failed attempt and the time it is visible again.
	Nack(seq uint64, attempts uint32, notBefore int64) error
	DeadLetter(seq uint64, attempts uint32, reason, lastErr string) error
	Redrive(seq uint64) error
	// Compact rewrites the live state into a fresh file.
	Compact() error
	Size() (int64, error)
	Close() error
}

// ErrLocked is returned when another process (or Store) holds the directory.
var ErrLocked = errors.New("durabilitylab: directory is locked by another open store")

// lockDir takes an exclusive, non-blocking flock on dir/LOCK.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, dir)
		}
		return nil, err
	}
	return f, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// apply helpers shared by journal replay and tests.
func (s *State) ack(seq uint64) { delete(s.Live, seq) }

func (s *State) nack(seq uint64, attempts uint32, nb int64) {
	if m := s.Live[seq]; m != nil {
		m.Attempts, m.NotBefore = attempts, nb
	}
}

func (s *State) deliver(seq uint64, attempt uint32) {
	if m := s.Live[seq]; m != nil {
		m.Attempts = attempt
	}
}

func (s *State) dead(seq uint64, attempts uint32, reason, lastErr string) {
	if m := s.Live[seq]; m != nil {
		delete(s.Live, seq)
		m.Dead, m.Attempts, m.Reason, m.LastErr = true, attempts, reason, lastErr
		s.Dead[seq] = m
	}
}

func (s *State) redrive(seq uint64) {
	if m := s.Dead[seq]; m != nil {
		delete(s.Dead, seq)
		m.Dead, m.Attempts, m.Reason, m.LastErr, m.NotBefore = false, 0, "", "", 0
		s.Live[seq] = m
	}
}
