package broker

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/internal/journal"
	"github.com/leasebus/leasebus/queue"
)

// path is the file a restore's CorruptError names.
func (st *store[T]) path() string {
	if st.j != nil {
		return st.j.Path()
	}
	return st.copyOf
}

// OpenCopy returns a broker in memory holding what the durable directory
// dir holds now: its topics, subscriptions (with their options), messages
// and dead letters, as Open would bring them back, and what it found in
// Recovery. It takes no lock and writes no byte, so it works while the
// broker that owns dir runs, in this process or another: what an inspector
// or a console over a live directory needs.
//
// The copy is a snapshot. Nothing done to it reaches dir, and nothing the
// owner does after it is taken shows in it. A message the owner had leased
// shows in flight, with no deadline and no lease anyone can settle, while
// the owner runs; once no process holds dir (its owner closed it, or died)
// it shows as the next Open will bring it back: visible, its attempt spent
// (or dead-lettered, if that was its last). Whether a process holds dir is
// read from the system's list of locks (Linux: /proc/locks), never by
// taking the lock; where the system keeps no such list, leased messages
// show in flight. A record the owner is still writing is left out. Codec is the one the
// owner uses (queue.BytesCodec shows any payload as its encoded bytes). Options
// are New's; the copy is closed as any broker is.
//
// A directory with no journal is an error matching fs.ErrNotExist; a
// journal that cannot be read, a *CorruptError (matching ErrCorrupt), as
// for Open. Salvage is not tried: the directory is the owner's.
func OpenCopy[T any](dir string, codec queue.Codec[T], opts ...Option) (*Broker[T], error) {
	if codec == nil {
		return nil, backend.Invalid("OpenCopy: nil codec")
	}
	if dir == "" {
		return nil, backend.Invalid("OpenCopy: empty directory name")
	}
	b, err := New[T](opts...)
	if err != nil {
		return nil, err
	}
	var rs *replay
	info, err := journal.Read(dir, func() func([]byte) error {
		rs = newReplay()
		return rs.apply
	})
	if err != nil {
		b.Close()
		switch {
		case errors.Is(err, journal.ErrNoJournal):
			return nil, fmt.Errorf("open a copy of %s: no journal there: %w", dir, fs.ErrNotExist)
		case errors.Is(err, journal.ErrCorrupt):
			return nil, fmt.Errorf("open a copy of %s: %w", dir, corruptError(err))
		}
		return nil, fmt.Errorf("open a copy of %s: %w", dir, err)
	}
	st := &store[T]{b: b, codec: codec, copyOf: dir}
	st.info = RecoveryInfo{Records: info.Records, TruncatedBytes: info.TruncatedBytes}
	owned, known := journal.Owned(dir)
	if err := b.restoreWith(rs, st, owned || !known); err != nil {
		b.Close()
		return nil, fmt.Errorf("open a copy of %s: %w", dir, err)
	}
	b.copied = &st.info
	return b, nil
}
