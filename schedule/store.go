package schedule

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Store keeps each schedule's last handled slot (fired, or skipped by a
// policy) across restarts (WithStore). The scheduler saves after the job
// of a slot returns nil, so a crash between the two fires that slot again
// on restart, with the same dedup ID: exactly once in the queue when the
// backend's dedup window covers the restart.
type Store interface {
	// Load returns the last slot saved for name, or ok false if none.
	Load(name string) (last time.Time, ok bool, err error)
	// Save records that the slots of name up to last are handled. A store
	// keeps the latest slot it is given: a Save of an earlier one changes
	// nothing.
	Save(name string, last time.Time) error
}

// FileStore is a Store in one JSON file, rewritten whole at each Save
// (written beside it, synced, then renamed over it, so that a crash
// leaves the old file or the new one). It suits a handful of schedules
// firing no more than a few times a second. One process at a time may
// write it: replicas that run at once each keep their own (the dedup IDs
// keep them from firing a slot twice), and a standby that takes over from
// a process that held a lock (such as a durable broker's directory)
// shares its file.
type FileStore struct {
	path string
	mu   sync.Mutex // serializes Saves of this process
}

// NewFileStore returns a FileStore in the file at path, which it creates
// at the first Save; its directory must exist.
func NewFileStore(path string) (*FileStore, error) {
	if path == "" {
		return nil, errors.New("schedule: NewFileStore: empty path")
	}
	fs := &FileStore{path: path}
	if _, err := fs.read(); err != nil {
		return nil, err
	}
	return fs, nil
}

// Load implements Store.
func (fs *FileStore) Load(name string) (time.Time, bool, error) {
	m, err := fs.read()
	if err != nil {
		return time.Time{}, false, err
	}
	t, ok := m[name]
	return t, ok, nil
}

// Slots returns the last slot saved for every schedule the file has, as
// `leasebus inspect -schedules` shows them.
func (fs *FileStore) Slots() (map[string]time.Time, error) { return fs.read() }

// Save implements Store.
func (fs *FileStore) Save(name string, last time.Time) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	m, err := fs.read()
	if err != nil {
		return err
	}
	if old, ok := m[name]; ok && !last.After(old) {
		return nil
	}
	m[name] = last
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("schedule: store %s: %w", fs.path, err)
	}
	tmp := fs.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("schedule: store: %w", err)
	}
	_, err = f.Write(append(data, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, fs.path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(fs.path))
	}
	if err != nil {
		return fmt.Errorf("schedule: store: %w", err)
	}
	return nil
}

func (fs *FileStore) read() (map[string]time.Time, error) {
	m := make(map[string]time.Time)
	data, err := os.ReadFile(fs.path)
	if errors.Is(err, os.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return nil, fmt.Errorf("schedule: store: %w", err)
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("schedule: store %s: %w", fs.path, err)
	}
	return m, nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
