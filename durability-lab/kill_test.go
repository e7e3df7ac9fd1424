package durabilitylab

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// TestKill9 checks the SyncNone promise against a real process crash: a child
// process publishes 1000 messages and acks 500 with write(2) only (no fsync,
// no Close), then SIGKILLs itself. Everything whose call returned must be
// there: the data is in the kernel's page cache, which outlives the process
// (it does not outlive an OS crash or power loss: nothing here can test that).
func TestKill9(t *testing.T) {
	if dir := os.Getenv("DURABILITYLAB_CHILD_DIR"); dir != "" {
		s, _, err := openers[os.Getenv("DURABILITYLAB_CHILD_STORE")](dir, SyncNone)
		if err != nil {
			os.Exit(3)
		}
		for i := 1; i <= 1000; i++ {
			s.Publish(msg(i))
		}
		for i := 1; i <= 500; i += 10 {
			s.Ack(uint64(i), uint64(i+1), uint64(i+2), uint64(i+3), uint64(i+4), uint64(i+5), uint64(i+6), uint64(i+7), uint64(i+8), uint64(i+9))
		}
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	for _, name := range []string{"journal", "bolt"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^TestKill9$")
			cmd.Env = append(os.Environ(), "DURABILITYLAB_CHILD_DIR="+dir, "DURABILITYLAB_CHILD_STORE="+name)
			err := cmd.Run()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("child: %v, want killed by SIGKILL", err)
			}
			s, st, err := openers[name](dir, SyncNone) // also: the dead process's lock is gone
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if len(st.Live) != 500 || st.Live[501] == nil || st.Live[500] != nil {
				t.Fatalf("recovered %d live, want 501..1000", len(st.Live))
			}
		})
	}
}
