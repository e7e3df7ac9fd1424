package broker_test

// Recovery proves every file before it trusts or deletes one: a file in the
// journal's name space that does not belong makes Open refuse, naming it,
// with no byte of the directory changed; Salvage sets such a file aside.

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
)

// snapshotDir returns every file of dir with its bytes, but LOCK (which
// Open creates if it is missing).
func snapshotDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	files := map[string]string{}
	for _, e := range ents {
		if e.Name() == "LOCK" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		files[e.Name()] = string(b)
	}
	return files
}

func TestOpenRefusesStrayFiles(t *testing.T) {
	seg1 := func(t *testing.T, dir string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, "seg-00000001.log"))
		require.NoError(t, err)
		return b
	}
	cases := []struct {
		name  string
		file  string // the stray file's name
		bytes func(t *testing.T, dir string) []byte
	}{
		{"empty newer segment", "seg-00000002.log", func(*testing.T, string) []byte { return nil }},
		{"garbage newer segment", "seg-00000002.log", func(*testing.T, string) []byte { return []byte("not a journal at all, just text\n") }},
		{"half-copied newer segment", "seg-00000002.log", func(t *testing.T, dir string) []byte { s := seg1(t, dir); return s[:len(s)/2] }},
		{"whole copy as a newer segment", "seg-00000002.log", seg1},
		{"copy as an older segment", "seg-00000000.log", seg1},
		{"stray tmp", "seg-00000007.tmp", seg1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := journalOf(t, 3) // m000, m001, m002 in seg-00000001.log
			path := filepath.Join(dir, c.file)
			require.NoError(t, os.WriteFile(path, c.bytes(t, dir), 0o644))
			before := snapshotDir(t, dir)

			_, err := broker.Open(dir, queue.StringCodec())
			require.ErrorIs(t, err, broker.ErrCorrupt)
			var ce *broker.CorruptError
			require.ErrorAs(t, err, &ce)
			require.Contains(t, []string{path, filepath.Join(dir, "seg-00000001.log")}, ce.Path, "names a file of the journal")
			require.Equal(t, before, snapshotDir(t, dir), "a refused Open changes no byte and removes no file")

			si, err := broker.Salvage(dir)
			require.NoError(t, err)
			require.NotEmpty(t, si.SetAside, "Salvage sets the file that does not belong aside")
			b, err := broker.Open(dir, queue.StringCodec())
			require.NoError(t, err)
			defer b.Close()
			s, err := b.Subscribe("t", "s")
			require.NoError(t, err)
			require.Equal(t, []string{"m000", "m001", "m002"}, payloads(s.TryPoll(10)), "nothing lost")
		})
	}
}

// A lone file that is not a leasebus journal, under a segment's name, is
// refused as it is: not cut as a torn tail.
func TestOpenRefusesLoneForeignSegment(t *testing.T) {
	for _, content := range []string{"hello\n", `{"not": "a journal"}`, "", "\x00\x00\x00\x00\x00\x00\x00\x00\x00"} {
		dir := t.TempDir()
		path := filepath.Join(dir, "seg-00000001.log")
		require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
		before := snapshotDir(t, dir)
		_, err := broker.Open(dir, queue.StringCodec())
		require.ErrorIs(t, err, broker.ErrCorrupt, "%q", content)
		require.Equal(t, before, snapshotDir(t, dir), "%q: unchanged", content)
	}
}
