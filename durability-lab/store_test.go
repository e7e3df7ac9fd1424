package durabilitylab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

type opener func(dir string, mode Mode) (Store, *State, error)

var openers = map[string]opener{
	"journal": func(d string, m Mode) (Store, *State, error) { return OpenJournal(d, m) },
	"bolt":    func(d string, m Mode) (Store, *State, error) { return OpenBolt(d, m) },
}

func msg(i int) *Msg {
	return &Msg{Seq: uint64(i), Priority: int8(i % 3), Key: fmt.Sprintf("k%d", i%7), Payload: []byte(fmt.Sprintf("payload-%d", i))}
}

// script applies the same operations to a store and to a model State.
func script(t *testing.T, s Store, model *State) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 200; i++ {
		m := msg(i)
		must(s.Publish(m))
		c := *m
		c.Payload = append([]byte(nil), m.Payload...)
		model.Live[c.Seq] = &c
	}
	var acks []uint64
	for i := 1; i <= 100; i++ {
		acks = append(acks, uint64(i))
		if len(acks) == 10 {
			must(s.Ack(acks...))
			for _, q := range acks {
				model.ack(q)
			}
			acks = acks[:0]
		}
	}
	for i := 101; i <= 120; i++ { // delivered, in flight at the crash
		must(s.Deliver(uint64(i), 1))
		model.deliver(uint64(i), 1)
	}
	for i := 121; i <= 140; i++ {
		must(s.Nack(uint64(i), 2, int64(i)*1e9))
		model.nack(uint64(i), 2, int64(i)*1e9)
	}
	for i := 141; i <= 150; i++ {
		must(s.DeadLetter(uint64(i), 5, "max-attempts", "boom"))
		model.dead(uint64(i), 5, "max-attempts", "boom")
	}
	must(s.Redrive(145))
	model.redrive(145)
}

func checkState(t *testing.T, got, want *State) {
	t.Helper()
	if len(got.Live) != len(want.Live) || len(got.Dead) != len(want.Dead) {
		t.Fatalf("live %d dead %d, want %d %d", len(got.Live), len(got.Dead), len(want.Live), len(want.Dead))
	}
	for _, p := range []struct{ g, w map[uint64]*Msg }{{got.Live, want.Live}, {got.Dead, want.Dead}} {
		for seq, w := range p.w {
			if g := p.g[seq]; !reflect.DeepEqual(g, w) {
				t.Fatalf("seq %d: got %+v want %+v", seq, g, w)
			}
		}
	}
}

func TestRecover(t *testing.T) {
	for name, open := range openers {
		for _, mode := range []Mode{SyncEach, SyncGroup, SyncNone} {
			t.Run(name+"/"+mode.String(), func(t *testing.T) {
				dir := t.TempDir()
				s, st, err := open(dir, mode)
				if err != nil {
					t.Fatal(err)
				}
				if len(st.Live)+len(st.Dead) != 0 {
					t.Fatal("fresh store not empty")
				}
				model := newState()
				script(t, s, model)
				// "crash": close without any extra sync (SyncNone never fsyncs).
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				s, st, err = open(dir, mode)
				if err != nil {
					t.Fatal(err)
				}
				checkState(t, st, model)
				if err := s.Compact(); err != nil {
					t.Fatal(err)
				}
				s.Close()
				s, st, err = open(dir, mode)
				if err != nil {
					t.Fatal(err)
				}
				checkState(t, st, model)
				// keep going after compaction
				if err := s.Ack(101); err != nil {
					t.Fatal(err)
				}
				model.ack(101)
				s.Close()
				s, st, err = open(dir, mode)
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				checkState(t, st, model)
			})
		}
	}
}

func TestLocked(t *testing.T) {
	for name, open := range openers {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s, _, err := open(dir, SyncNone)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, _, err := open(dir, SyncNone); !errors.Is(err, ErrLocked) {
				t.Fatalf("second open: %v, want ErrLocked", err)
			}
		})
	}
}

// TestJournalTornTail cuts the last record short, or flips a byte in it: the
// record is dropped, the file truncated, and everything before it recovered.
func TestJournalTornTail(t *testing.T) {
	for _, damage := range []string{"truncate", "corrupt", "garbage"} {
		t.Run(damage, func(t *testing.T) {
			dir := t.TempDir()
			j, _, err := OpenJournal(dir, SyncNone)
			if err != nil {
				t.Fatal(err)
			}
			model := newState()
			for i := 1; i <= 10; i++ {
				j.Publish(msg(i))
				if i < 10 || damage == "garbage" {
					model.Live[uint64(i)] = msg(i)
				}
			}
			j.Close()
			path := filepath.Join(dir, "seg-00000001.log")
			fi, _ := os.Stat(path)
			switch damage {
			case "truncate":
				os.Truncate(path, fi.Size()-5)
			case "corrupt":
				data, _ := os.ReadFile(path)
				data[len(data)-3] ^= 0xff
				os.WriteFile(path, data, 0o644)
			case "garbage":
				f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
				f.Write([]byte{200, 0, 0, 0, 1, 2, 3, 4, 5})
				f.Close()
			}
			j, st, err := OpenJournal(dir, SyncNone)
			if err != nil {
				t.Fatal(err)
			}
			if st.TruncatedBytes == 0 {
				t.Fatal("no truncation reported")
			}
			checkState(t, st, model)
			j.Publish(msg(11)) // appends after the cut
			model.Live[11] = msg(11)
			j.Close()
			j, st, err = OpenJournal(dir, SyncNone)
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			if st.TruncatedBytes != 0 {
				t.Fatal("second open truncated again")
			}
			checkState(t, st, model)
		})
	}
}

// TestJournalAutoCompact: history does not grow the files.
func TestJournalAutoCompact(t *testing.T) {
	dir := t.TempDir()
	j, _, err := OpenJournal(dir, SyncNone)
	if err != nil {
		t.Fatal(err)
	}
	j.MinCompact = 64 << 10
	for i := 1; i <= 20000; i++ {
		j.Publish(msg(i))
		if i > 5 {
			j.Ack(uint64(i - 5))
		}
	}
	size, _ := j.Size()
	if size > 2*j.MinCompact {
		t.Fatalf("size %d after 20k publish+ack, want <= %d", size, 2*j.MinCompact)
	}
	j.Close()
	_, st, err := OpenJournal(dir, SyncNone)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Live) != 5 {
		t.Fatalf("live %d, want 5", len(st.Live))
	}
}

func TestPutSize(t *testing.T) {
	for _, m := range []*Msg{msg(1), {Seq: 9, Reason: "r", LastErr: string(make([]byte, 300)), Payload: make([]byte, 64)}} {
		if got, want := putSize(m), len(encPut(nil, m)); got != want {
			t.Fatalf("putSize %d, want %d", got, want)
		}
	}
}

func TestPublishBatch(t *testing.T) {
	for name, open := range openers {
		for _, mode := range []Mode{SyncEach, SyncGroup, SyncNone} {
			t.Run(name+"/"+mode.String(), func(t *testing.T) {
				dir := t.TempDir()
				s, _, err := open(dir, mode)
				if err != nil {
					t.Fatal(err)
				}
				model := newState()
				var ms []*Msg
				for i := 1; i <= 50; i++ {
					ms = append(ms, msg(i))
					model.Live[uint64(i)] = msg(i)
				}
				if err := s.PublishBatch(ms); err != nil {
					t.Fatal(err)
				}
				s.Ack(1, 2, 3)
				model.ack(1)
				model.ack(2)
				model.ack(3)
				s.Close()
				s, st, err := open(dir, mode)
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				checkState(t, st, model)
			})
		}
	}
}
