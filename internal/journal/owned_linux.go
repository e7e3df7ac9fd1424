package journal

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Owned reports whether a process holds dir's lock (a broker has dir open,
// in this process or another), and whether it could tell. It takes no
// lock and writes nothing, so it never gets in an owner's way: it looks
// the lock file up in /proc/locks, where Linux lists every flock held.
// A directory with no lock file was never opened: no one holds it.
func Owned(dir string) (owned, known bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dir, "LOCK"), &st); err != nil {
		return false, errors.Is(err, fs.ErrNotExist)
	}
	f, err := os.Open("/proc/locks")
	if err != nil {
		return false, false
	}
	defer f.Close()
	// "1: FLOCK  ADVISORY  WRITE 5103 fe:00:9977941 0 EOF": the device's
	// major and minor numbers in hex, then the inode in decimal.
	major, minor := (st.Dev>>8)&0xfff|(st.Dev>>32)&^0xfff, st.Dev&0xff|(st.Dev>>12)&^0xff
	want := fmt.Sprintf("%02x:%02x:%d", major, minor, st.Ino)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 6 && fields[1] == "FLOCK" && fields[5] == want {
			return true, true
		}
	}
	return false, sc.Err() == nil
}
