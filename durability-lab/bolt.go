package durabilitylab

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// Bolt is option (b): go.etcd.io/bbolt, one bucket "m" of live messages and
// one bucket "d" of dead letters, keyed by big-endian sequence; the value is
// the journal's put encoding (encPut). Ack deletes. bbolt fsyncs every
// read-write transaction (data pages, then the meta page): SyncEach = one
// db.Update per call, SyncGroup = db.Batch (calls from concurrent goroutines
// share one transaction), SyncNone = db.NoSync.
type Bolt struct {
	db   *bolt.DB
	path string
	mode Mode
}

var (
	bktLive = []byte("m")
	bktDead = []byte("d")
)

// OpenBolt opens dir/leasebus.db. bbolt takes its own flock on the file;
// with a Timeout a second opener gets an error instead of blocking forever.
func OpenBolt(dir string, mode Mode) (*Bolt, *State, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	path := filepath.Join(dir, "leasebus.db")
	db, err := bolt.Open(path, 0o644, &bolt.Options{Timeout: 50 * time.Millisecond, NoSync: mode == SyncNone})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, nil, ErrLocked
		}
		return nil, nil, err
	}
	db.MaxBatchDelay = BoltBatchDelay
	s := &Bolt{db: db, path: path, mode: mode}
	st := newState()
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bktLive, bktDead} {
			b, err := tx.CreateBucketIfNotExists(name)
			if err != nil {
				return err
			}
			if err := b.ForEach(func(k, v []byte) error {
				m := decPut(v)
				if m.Dead {
					st.Dead[m.Seq] = m
				} else {
					st.Live[m.Seq] = m
				}
				return nil
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return s, st, nil
}

func (s *Bolt) update(fn func(tx *bolt.Tx) error) error {
	if s.mode == SyncGroup {
		return s.db.Batch(fn)
	}
	return s.db.Update(fn)
}

func key(seq uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), seq) }

// Publish records a new message.
func (s *Bolt) Publish(m *Msg) error {
	v := encPut(nil, m)
	return s.update(func(tx *bolt.Tx) error { return tx.Bucket(bktLive).Put(key(m.Seq), v) })
}

// PublishBatch records several messages in one transaction.
func (s *Bolt) PublishBatch(ms []*Msg) error {
	return s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bktLive)
		for _, m := range ms {
			if err := b.Put(key(m.Seq), encPut(nil, m)); err != nil {
				return err
			}
		}
		return nil
	})
}

// Ack deletes seqs in one transaction.
func (s *Bolt) Ack(seqs ...uint64) error {
	return s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bktLive)
		for _, q := range seqs {
			if err := b.Delete(key(q)); err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *Bolt) modify(seq uint64, fn func(m *Msg)) error {
	return s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bktLive)
		v := b.Get(key(seq))
		if v == nil {
			return nil
		}
		m := decPut(v)
		fn(m)
		return b.Put(key(seq), encPut(nil, m))
	})
}

// Deliver records the attempt number of a delivery.
func (s *Bolt) Deliver(seq uint64, attempt uint32) error {
	return s.modify(seq, func(m *Msg) { m.Attempts = attempt })
}

// Nack records a failed attempt and the not-before time.
func (s *Bolt) Nack(seq uint64, attempts uint32, notBefore int64) error {
	return s.modify(seq, func(m *Msg) { m.Attempts, m.NotBefore = attempts, notBefore })
}

// DeadLetter moves a message to the dead-letter bucket.
func (s *Bolt) DeadLetter(seq uint64, attempts uint32, reason, lastErr string) error {
	return s.update(func(tx *bolt.Tx) error {
		live := tx.Bucket(bktLive)
		v := live.Get(key(seq))
		if v == nil {
			return nil
		}
		m := decPut(v)
		m.Dead, m.Attempts, m.Reason, m.LastErr = true, attempts, reason, lastErr
		if err := live.Delete(key(seq)); err != nil {
			return err
		}
		return tx.Bucket(bktDead).Put(key(seq), encPut(nil, m))
	})
}

// Redrive moves a dead letter back, attempts reset.
func (s *Bolt) Redrive(seq uint64) error {
	return s.update(func(tx *bolt.Tx) error {
		dead := tx.Bucket(bktDead)
		v := dead.Get(key(seq))
		if v == nil {
			return nil
		}
		m := decPut(v)
		m.Dead, m.Attempts, m.Reason, m.LastErr, m.NotBefore = false, 0, "", "", 0
		if err := dead.Delete(key(seq)); err != nil {
			return err
		}
		return tx.Bucket(bktLive).Put(key(seq), encPut(nil, m))
	})
}

// Compact copies the live pages into a new file with bolt.Compact and renames
// it over the old one (a bbolt file never shrinks by itself; freed pages are
// reused). The store must be idle.
func (s *Bolt) Compact() error {
	tmp := s.path + ".compact"
	os.Remove(tmp)
	dst, err := bolt.Open(tmp, 0o644, nil)
	if err != nil {
		return err
	}
	if err := bolt.Compact(dst, s.db, 1<<20); err != nil {
		dst.Close()
		return err
	}
	if err := dst.Close(); err != nil {
		return err
	}
	if err := s.db.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, s.path); err != nil {
		return err
	}
	if err := syncDir(filepath.Dir(s.path)); err != nil {
		return err
	}
	db, err := bolt.Open(s.path, 0o644, &bolt.Options{Timeout: 50 * time.Millisecond, NoSync: s.mode == SyncNone})
	if err != nil {
		return err
	}
	db.MaxBatchDelay = BoltBatchDelay
	s.db = db
	return nil
}

// Size is the file size.
func (s *Bolt) Size() (int64, error) {
	fi, err := os.Stat(s.path)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// Close closes the db (bbolt has no unsynced user-space buffer: with NoSync
// the pages are in the page cache once each transaction commits).
func (s *Bolt) Close() error { return s.db.Close() }

var (
	_ Store = (*Journal)(nil)
	_ Store = (*Bolt)(nil)
)
