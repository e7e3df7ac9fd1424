package testkit

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// KillRun runs this test binary again as a child that runs only the test
// named test (the child tells itself apart by env, which is added to the
// parent's environment), kills it with SIGKILL after the first line of
// its output for which kill reports true (kill gets the line and how many
// have come; nil: never), and returns every line it printed and whether
// it was killed. A child that ends otherwise than by exiting 0 or by the
// kill fails the test, with what it wrote to stderr.
func KillRun(t testing.TB, test string, env []string, kill func(line string, n int) bool) (lines []string, killed bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$")
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill() // if a check below fails first
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if kill != nil && kill(sc.Text(), len(lines)) {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			kill = nil
		}
	}
	err = cmd.Wait()
	if err == nil {
		return lines, false
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child: %v; stderr: %s", err, stderr.String())
	}
	return lines, true
}
