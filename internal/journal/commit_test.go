package journal

// Commit and the group commit: when records are due, concurrent committers,
// sticky errors, Close, and the write buffer. Helpers are journal_test.go's.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDue(t *testing.T) {
	rec := []byte("0123456789ab") // a 20-byte frame
	const frame = 20

	t.Run("threshold", func(t *testing.T) {
		j, _, _ := open(t, t.TempDir(), SyncNone, 5*frame)
		require.False(t, j.Due(), "empty")
		for range 4 {
			j.Append(rec)
		}
		require.Equal(t, int64(4*frame), j.Size())
		require.False(t, j.Due(), "below minCompact")
		j.Append(rec)
		require.True(t, j.Due(), "size == minCompact (pending records count)")
		require.NoError(t, j.Commit())
		require.True(t, j.Due())

		// After a Rewrite to 4 frames, due again at 8 frames (2x), not at
		// minCompact.
		require.NoError(t, j.Rewrite(func(emit func([]byte)) error {
			for range 4 {
				emit(rec)
			}
			return nil
		}))
		require.Equal(t, int64(4*frame), j.Size())
		require.False(t, j.Due())
		for range 3 {
			j.Append(rec)
		}
		require.Equal(t, int64(7*frame), j.Size())
		require.False(t, j.Due(), "over minCompact but under twice the base")
		j.Append(rec)
		require.True(t, j.Due(), "twice the base")

		// After a Rewrite to 1 frame, minCompact rules again.
		require.NoError(t, j.Rewrite(func(emit func([]byte)) error { emit(rec); return nil }))
		require.False(t, j.Due())
		for range 3 {
			j.Append(rec)
		}
		require.False(t, j.Due(), "twice the base but under minCompact")
		j.Append(rec)
		require.True(t, j.Due())

		require.NoError(t, j.Close())
		require.False(t, j.Due(), "closed")
	})

	t.Run("base is the size at Open", func(t *testing.T) {
		dir := t.TempDir()
		recs := make([][]byte, 6)
		for i := range recs {
			recs[i] = rec
		}
		write(t, dir, SyncNone, recs)
		j, _, _ := open(t, dir, SyncNone, frame)
		require.False(t, j.Due())
		for range 5 {
			j.Append(rec)
		}
		require.False(t, j.Due())
		j.Append(rec)
		require.True(t, j.Due())
	})

	for _, minCompact := range []int64{0, -1} {
		t.Run(fmt.Sprintf("minCompact %d never", minCompact), func(t *testing.T) {
			j, _, _ := open(t, t.TempDir(), SyncNone, minCompact)
			for range 100 {
				j.Append(rec)
			}
			require.False(t, j.Due())
			require.NoError(t, j.Commit())
			require.False(t, j.Due())
		})
	}

	t.Run("a failed Rewrite waits for another doubling", func(t *testing.T) {
		j, _, _ := open(t, t.TempDir(), SyncNone, 2*frame)
		for range 3 {
			j.Append(rec)
		}
		require.True(t, j.Due())
		require.Error(t, j.Rewrite(func(func([]byte)) error { return errors.New("boom") }))
		require.False(t, j.Due(), "base is now 3 frames")
		for range 2 {
			j.Append(rec)
		}
		require.False(t, j.Due(), "5 frames < 2*3")
		j.Append(rec)
		require.True(t, j.Due(), "6 frames")
	})

	t.Run("not after an error", func(t *testing.T) {
		j, _, _ := open(t, t.TempDir(), SyncNone, 1)
		j.Append(rec)
		require.True(t, j.Due())
		j.Append(nil)
		require.False(t, j.Due())
	})
}

func TestConcurrentAppendCommit(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			dir := t.TempDir()
			j, _, _ := open(t, dir, m.mode, 0)
			const workers, each = 8, 200
			var wg sync.WaitGroup
			errs := make(chan error, workers*each)
			for w := range workers {
				wg.Go(func() {
					for i := range each {
						j.Append([]byte(fmt.Sprintf("w%d-%d", w, i)))
						if err := j.Commit(); err != nil {
							errs <- err
						}
						_ = j.Size()
						_ = j.Due()
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			require.NoError(t, j.Close())

			got, info := replayAll(t, dir)
			require.Equal(t, workers*each, info.Records)
			require.Zero(t, info.TruncatedBytes)
			next := make([]int, workers)
			for _, b := range got {
				var w, i int
				_, err := fmt.Sscanf(string(b), "w%d-%d", &w, &i)
				require.NoError(t, err, "record %q", b)
				require.Less(t, w, workers)
				require.Equal(t, next[w], i, "worker %d's records in order, each once", w)
				next[w]++
			}
			for w := range workers {
				require.Equal(t, each, next[w], "worker %d", w)
			}
		})
	}
}

// Committers that share a flush: each Commit returns only once its own
// record is written, which the file shows right then.
func TestCommitCoversOwnRecord(t *testing.T) {
	dir := t.TempDir()
	j, _, _ := open(t, dir, SyncNone, 0)
	const workers = 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	for w := range workers {
		wg.Go(func() {
			for i := range 20 {
				b := []byte(fmt.Sprintf("w%d-%d", w, i))
				j.Append(b)
				if err := j.Commit(); err != nil {
					mu.Lock()
					failures = append(failures, err.Error())
					mu.Unlock()
					return
				}
				data, err := os.ReadFile(segName(dir, 1))
				if err == nil && !bytes.Contains(data, AppendFrame(nil, b)) {
					err = fmt.Errorf("%s not in the file after its Commit", b)
				}
				if err != nil {
					mu.Lock()
					failures = append(failures, err.Error())
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	require.Empty(t, failures)
}

func TestAfterClose(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			dir := t.TempDir()
			j, _, _ := open(t, dir, m.mode, 0)
			j.Append(body(0))
			require.NoError(t, j.Close())
			require.NoError(t, j.Close(), "Close twice returns nil")

			// An Append after Close is dropped. (What Commit then returns is
			// TestCommitAfterCloseReportsErrClosed's business.)
			j.Append(body(1))
			require.Equal(t, int64(8+len(body(0))), j.Size(), "the dropped record is not counted")
			require.False(t, j.Due())
			called := false
			require.ErrorIs(t, j.Rewrite(func(func([]byte)) error { called = true; return nil }), ErrClosed)
			require.False(t, called)
			require.NoError(t, j.Close())

			got, _ := replayAll(t, dir)
			require.Equal(t, bodies(0, 1), got)
		})
	}
}

func TestInvalidAppendIsSticky(t *testing.T) {
	for name, bad := range map[string][]byte{
		"nil":      nil,
		"empty":    {},
		"too long": make([]byte, MaxRecord+1),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			j, _, _ := open(t, dir, SyncAlways, 0)
			j.Append(body(0))
			require.NoError(t, j.Commit())

			j.Append(bad)
			err := j.Commit()
			require.ErrorContains(t, err, fmt.Sprintf("record of %d bytes", len(bad)))
			require.Equal(t, err, j.Sync(), "sticky")
			j.Append(body(1)) // dropped
			require.Equal(t, err, j.Commit(), "sticky")
			require.Equal(t, int64(8+len(body(0))), j.Size())
			require.Equal(t, err, j.Rewrite(func(func([]byte)) error { return nil }))
			require.Equal(t, err, j.Close(), "Close reports it")
			require.NoError(t, j.Close())

			// Close released the directory; what was committed is there.
			got, info := replayAll(t, dir)
			require.Equal(t, bodies(0, 1), got)
			require.Equal(t, 1, info.Segment)
		})
	}
}

// After a flush of more than 1 MiB, commit keeps j.spare pointing at the
// buffer that j.pend now uses, so the next leader hands the very buffer it
// is writing (unlocked) back to j.pend, and Appends made during that write
// overwrite the bytes on their way to the file.
//
// White box: the segment file is swapped for a pipe so that the leader's
// write blocks, deterministically, while another record is appended.
func TestCommitDoesNotReuseBufferBeingWritten(t *testing.T) {
	dir := t.TempDir()
	j, _, _ := open(t, dir, SyncNone, 0)

	j.Append([]byte("small"))
	require.NoError(t, j.Commit())
	j.Append(bytes.Repeat([]byte{1}, 256<<10)) // a 256 KiB buffer becomes spare
	require.NoError(t, j.Commit())
	j.Append(bytes.Repeat([]byte{2}, 2<<20)) // a flush of more than 1 MiB
	require.NoError(t, j.Commit())

	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	j.mu.Lock()
	seg := j.f
	j.f = w
	j.mu.Unlock()

	rec4 := bytes.Repeat([]byte{4}, 192<<10) // more than a pipe holds
	rec5 := bytes.Repeat([]byte{5}, 128<<10)
	j.Append(rec4)
	done := make(chan error, 1)
	go func() { done <- j.Commit() }()

	want := AppendFrame(nil, rec4)
	got := make([]byte, len(want))
	_, err = io.ReadFull(r, got[:8]) // the leader is now inside its write
	require.NoError(t, err)
	j.Append(rec5) // while the leader writes rec4
	_, err = io.ReadFull(r, got[8:])
	require.NoError(t, err)
	require.NoError(t, <-done)

	j.mu.Lock()
	j.f = seg
	j.mu.Unlock()
	require.NoError(t, w.Close())

	require.True(t, bytes.Equal(want, got), "the bytes written for rec4 were overwritten by rec5")
}

// Close's doc: "Later calls return ErrClosed"; Append's doc: "an Append
// after Close ... is dropped, and the next Commit reports why". But commit
// checks done >= target before closed, and after Close nothing is pending:
// Commit and Sync return nil, and a caller is told its dropped record is
// committed.
func TestCommitAfterCloseReportsErrClosed(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			dir := t.TempDir()
			j, _, _ := open(t, dir, m.mode, 0)
			require.NoError(t, j.Close())
			j.Append(body(0)) // dropped
			require.ErrorIs(t, j.Commit(), ErrClosed)
			require.ErrorIs(t, j.Sync(), ErrClosed)
			got, _ := replayAll(t, dir)
			require.Empty(t, got)
		})
	}
}

// A record appended before Close is written by Close, so a Commit racing
// Close returns nil for it: it is in the file. (It used to return ErrClosed
// for a record that was stored.)
func TestCommitAfterCloseCoversRecordsCloseWrote(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			dir := t.TempDir()
			j, _, _ := open(t, dir, m.mode, 0)
			j.Append(body(0))
			require.NoError(t, j.Close())
			require.NoError(t, j.Commit(), "its record is in the file")
			got, _ := replayAll(t, dir)
			require.Equal(t, bodies(0, 1), got)
		})
	}
}

// TestCommitDoesNotReuseBufferBeingWritten's bug seen from outside, with a
// real file: records whose Commit returned nil are lost at the next Open.
func TestConcurrentCommitAfterLargeFlush(t *testing.T) {
	dir := t.TempDir()
	j, _, _ := open(t, dir, SyncNone, 0)
	first := [][]byte{[]byte("small"), bytes.Repeat([]byte{1}, 512<<10), bytes.Repeat([]byte{2}, 2<<20)}
	for _, b := range first {
		j.Append(b)
		require.NoError(t, j.Commit())
	}
	const workers, each = 8, 100
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				j.Append(append([]byte(fmt.Sprintf("w%d-%d-", w, i)), bytes.Repeat([]byte{'a'}, 48<<10)...))
				if err := j.Commit(); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, j.Close())
	got, info := replayAll(t, dir)
	require.Zero(t, info.TruncatedBytes, "a committed segment has no bad tail")
	require.Len(t, got, len(first)+workers*each)
}
