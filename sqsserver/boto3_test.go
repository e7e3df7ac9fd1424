package sqsserver_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

// python returns the Python that has Debian's module (or modules, given
// as "a, b"), skipping the test without one unless LEASEBUS_PYTHON=required
// (as .ci/run sets, having installed them). It looks at Debian's own
// /usr/bin/python3 (or LEASEBUS_PYTHON_BIN), never another python3 on the
// PATH: the tests are of Debian's versions (a newer boto3 speaks SQS's
// JSON protocol, not the query protocol these tests are of).
func python(t *testing.T, module string) string {
	t.Helper()
	for _, p := range []string{os.Getenv("LEASEBUS_PYTHON_BIN"), "/usr/bin/python3"} {
		if p == "" {
			continue
		}
		if path, err := exec.LookPath(p); err == nil && exec.Command(path, "-c", "import "+module).Run() == nil {
			return path
		}
	}
	if os.Getenv("LEASEBUS_PYTHON") == "required" {
		t.Fatalf("no python3 with %s, and LEASEBUS_PYTHON=required (install Debian's python3-%s)", module, module)
	}
	t.Skipf("no python3 with %s: install Debian's python3-%s to run this test", module, module)
	return ""
}

// Debian's boto3 1.26 speaks SQS's query protocol: every action it has,
// its MD5 checks, its exceptions, and a visibility timeout passed by
// moving the mock clock from Python.
func TestBoto3QueryProtocol(t *testing.T) {
	py := python(t, "boto3")
	srv := sqstest.Start(t)
	out, err := exec.Command(py, "testdata/boto3_sqs.py", srv.URL).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("boto3: %v\n%s", err, out)
	}
}

// Debian's boto3 speaks SNS's query protocol too (every SDK does): a topic
// fanned out to two queues by filter policy, enveloped and raw, and FIFO.
func TestBoto3SNS(t *testing.T) {
	py := python(t, "boto3")
	srv := sqstest.Start(t)
	out, err := exec.Command(py, "testdata/boto3_sns.py", srv.URL).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("boto3: %v\n%s", err, out)
	}
}
