package sqsserver

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// state is what a durable server keeps in dir/queues.json beside the
// journal: its queues with their attributes and tags, the receipt-handle
// key, and the sequence numbers reserved.
type state struct {
	Version  int          `json:"version"`
	Key      []byte       `json:"key"`
	SeqFloor uint64       `json:"seqFloor"`
	Queues   []savedQueue `json:"queues"`
	Topics   []savedTopic `json:"topics,omitempty"` // SNS
}

type savedTopic struct {
	Name          string            `json:"name"`
	Attributes    map[string]string `json:"attributes,omitempty"`
	Tags          map[string]string `json:"tags,omitempty"`
	Subscriptions []savedSub        `json:"subscriptions,omitempty"`
}

type savedSub struct {
	Arn        string            `json:"arn"`
	Endpoint   string            `json:"endpoint"`
	Attributes map[string]string `json:"attributes,omitempty"`
}

type savedQueue struct {
	Name       string            `json:"name"`
	Gen        uint64            `json:"gen"`
	Attributes map[string]string `json:"attributes"`
	Tags       map[string]string `json:"tags,omitempty"`
	Created    time.Time         `json:"created"`
	Modified   time.Time         `json:"modified"`
}

const stateVersion = 1

// saveLocked writes the state file of a durable server atomically (a
// temporary file, fsync, rename, fsync of the directory); an in-memory
// server has none. Called with s.mu held.
func (s *Server) saveLocked() error {
	if s.cfg.dir == "" {
		return nil
	}
	st := state{Version: stateVersion, Key: s.key, SeqFloor: s.seqFloor.Load()}
	for _, q := range s.queues {
		q.mu.Lock()
		st.Queues = append(st.Queues, savedQueue{
			Name: q.name, Gen: q.gen, Attributes: q.attrs, Tags: q.tags, Created: q.created, Modified: q.modified,
		})
		q.mu.Unlock()
	}
	for _, name := range slices.Sorted(maps.Keys(s.topics)) {
		t := s.topics[name]
		saved := savedTopic{Name: t.name, Attributes: t.attrs, Tags: t.tags}
		for _, sub := range t.subs {
			saved.Subscriptions = append(saved.Subscriptions, savedSub{Arn: sub.arn, Endpoint: sub.endpoint, Attributes: sub.attrs})
		}
		st.Topics = append(st.Topics, saved)
	}
	slices.SortFunc(st.Queues, func(a, b savedQueue) int {
		if a.Name < b.Name {
			return -1
		}
		return 1
	})
	b, err := json.MarshalIndent(st, "", "\t")
	if err != nil {
		return kInternal.new("encode state: %v", err)
	}
	if err := writeAtomic(filepath.Join(s.cfg.dir, stateFile), b); err != nil {
		return kInternal.new("save state: %v", err)
	}
	return nil
}

func writeAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".queues-*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename, nothing to remove
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// restore reads a durable server's state file (none: a new directory),
// binds each queue to its recovered topic, and deletes the topics of
// queues that were deleted (the state file is written first, so a crash
// between the two leaves such a topic behind).
func (s *Server) restore() error {
	path := filepath.Join(s.cfg.dir, stateFile)
	b, err := os.ReadFile(path)
	var st state
	switch {
	case os.IsNotExist(err):
		st = state{Version: stateVersion}
	case err != nil:
		return fmt.Errorf("sqsserver: %w", err)
	default:
		if err := json.Unmarshal(b, &st); err != nil {
			return fmt.Errorf("sqsserver: %s is not a queue state file: %w", path, err)
		}
		if st.Version != stateVersion {
			return fmt.Errorf("sqsserver: %s has version %d, this server reads %d", path, st.Version, stateVersion)
		}
	}
	switch {
	case s.cfg.key != nil:
		s.key = s.cfg.key
	case len(st.Key) >= 16:
		s.key = st.Key
	default:
		s.key = randomBytes(32)
	}
	s.seqFloor.Store(st.SeqFloor)
	s.seq.Store(st.SeqFloor)
	for _, sq := range st.Queues {
		fifo, err := validQueueName(sq.Name)
		if err != nil {
			return fmt.Errorf("sqsserver: %s: %w", path, err)
		}
		attrs := defaultAttributes(fifo)
		for k, v := range sq.Attributes {
			attrs[k] = v
		}
		q := &sqsQueue{
			name: sq.Name, fifo: fifo, gen: sq.Gen, attrs: attrs, st: parseSettings(attrs),
			tags: sq.Tags, created: sq.Created, modified: sq.Modified,
		}
		if err := s.attach(q); err != nil {
			return fmt.Errorf("sqsserver: restore queue %s: %w", q.name, err)
		}
		s.queues[q.name] = q
	}
	for _, saved := range st.Topics {
		if err := s.restoreTopic(saved); err != nil {
			return fmt.Errorf("sqsserver: %s: %w", path, err)
		}
	}
	for _, t := range s.b.Topics() {
		if s.queues[t] == nil {
			if err := s.b.DeleteTopic(t); err != nil {
				return fmt.Errorf("sqsserver: drop the topic of deleted queue %s: %w", t, err)
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.saveLocked() // the key, on a new directory
}

// nextSeq returns the next FIFO sequence number. A durable server reserves
// them in blocks in its state file, so that they keep growing across a
// restart.
func (s *Server) nextSeq() (uint64, error) {
	n := s.seq.Add(1)
	if s.cfg.dir == "" {
		return n, nil
	}
	if n < s.seqFloor.Load() {
		return n, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.seqFloor.Load()
	if n < old {
		return n, nil
	}
	s.seqFloor.Store(n + seqBlock)
	if err := s.saveLocked(); err != nil {
		s.seqFloor.Store(old)
		return 0, err
	}
	return n, nil
}
