package sqsserver_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/leasebus/leasebus/sqsserver"
	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

// The kill test runs a child process (this test binary again) that serves
// a durable server on a loopback port and, through the SDK, sends
// messages to a queue whose RedrivePolicy moves a message to its
// dead-letter queue on its second receive, receives with a visibility of 0
// (so every receive counts and the next moves), and every few sends starts
// a move task that moves the dead-letter queue's messages back. Messages
// bounce between the two queues while the parent kills the child with
// SIGKILL after a random number of lines. After each kill, a copy of the
// directory must hold every message whose send returned, exactly once,
// in one queue or the other: a move is one commit.
const (
	killDirEnv   = "LEASEBUS_SQS_KILL_DIR"
	killFirstEnv = "LEASEBUS_SQS_KILL_FIRST"
)

func TestKilledServerMovesEachMessageOnce(t *testing.T) {
	if dir := os.Getenv(killDirEnv); dir != "" {
		first, _ := strconv.Atoi(os.Getenv(killFirstEnv))
		killChild(dir, first)
		return
	}
	if testing.Short() {
		t.Skip("runs and kills a server process 25 times")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(39, 4))
	sent, sending := map[string]bool{}, map[string]bool{}
	next, moves := 0, 0
	const runs = 25
	for run := range runs {
		lines := killRun(t, dir, next, 20+rng.IntN(200))
		for _, l := range lines {
			op, n, _ := strings.Cut(l, " ")
			switch op {
			case "s":
				sending[n] = true
				k, _ := strconv.Atoi(n)
				next = max(next, k+1)
			case "S":
				sent[n] = true
			case "M":
				moves++
			}
		}
		killCheck(t, dir, run, sent, sending)
	}
	if len(sent) == 0 || moves == 0 {
		t.Fatalf("%d runs sent %d messages and moved %d times: the test moved nothing", runs, len(sent), moves)
	}
	t.Logf("%d runs: %d messages sent, %d move tasks that moved some", runs, len(sent), moves)
}

// killRun starts a child on dir that sends from first on, kills it once it
// has printed kill lines, and returns the lines it printed.
func killRun(t *testing.T, dir string, first, kill int) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledServerMovesEachMessageOnce$")
	cmd.Env = append(os.Environ(), killDirEnv+"="+dir, killFirstEnv+"="+strconv.Itoa(first))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill() // if a check below fails first (a no-op once it is dead)
	var lines []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) == kill {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the child was not killed (%v) after %d lines; its stderr:\n%s", err, len(lines), stderr.String())
	}
	return lines // whole lines only: each is one write(2) of less than PIPE_BUF
}

// killQueues creates (again: CreateQueue is idempotent) the source queue and
// its dead-letter queue, and returns their URLs and the dead-letter
// queue's ARN.
func killQueues(ctx context.Context, c *sqs.Client) (src, dlq, dlqARN string, err error) {
	out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("dlq")})
	if err != nil {
		return "", "", "", err
	}
	dlq = aws.ToString(out.QueueUrl)
	dlqARN = "arn:aws:sqs:us-east-1:000000000000:dlq"
	out, err = c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("src"), Attributes: map[string]string{
		"RedrivePolicy": `{"deadLetterTargetArn":"` + dlqARN + `","maxReceiveCount":1}`,
	}})
	if err != nil {
		return "", "", "", err
	}
	return aws.ToString(out.QueueUrl), dlq, dlqARN, nil
}

// killChild serves dir and works until it is killed. Lines: "s n" before
// sending message n, "S n" once the send returned, "M k" when a move task
// moved k messages back.
func killChild(dir string, first int) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(3)
	}
	srv, err := sqsserver.New(sqsserver.WithDir(dir))
	if err != nil {
		fail(err)
	}
	hs := httptest.NewServer(srv)
	c := sqstest.NewClient(hs.URL, nil)
	ctx := context.Background()
	src, _, dlqARN, err := killQueues(ctx, c)
	if err != nil {
		fail(err)
	}
	for n := first; ; n++ {
		fmt.Printf("s %d\n", n)
		if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &src, MessageBody: aws.String("m" + strconv.Itoa(n))}); err != nil {
			fail(err)
		}
		fmt.Printf("S %d\n", n)
		// A visibility of 0: each receive counts, and the next one moves
		// what it received before to the dead-letter queue.
		if _, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &src, MaxNumberOfMessages: 10, VisibilityTimeout: 0}); err != nil {
			fail(err)
		}
		if n%4 == 0 {
			if _, err := c.StartMessageMoveTask(ctx, &sqs.StartMessageMoveTaskInput{SourceArn: &dlqARN}); err != nil {
				fail(err)
			}
			tasks, err := c.ListMessageMoveTasks(ctx, &sqs.ListMessageMoveTasksInput{SourceArn: &dlqARN})
			if err != nil {
				fail(err)
			}
			if len(tasks.Results) > 0 && tasks.Results[0].ApproximateNumberOfMessagesMoved > 0 { // the newest first: this one
				fmt.Printf("M %d\n", tasks.Results[0].ApproximateNumberOfMessagesMoved)
			}
		}
	}
}

// killCheck opens a copy of dir, as the kill left it, and checks that every
// message sent is in exactly one of the two queues, and nothing else is.
func killCheck(t *testing.T, dir string, run int, sent, sending map[string]bool) {
	t.Helper()
	cp := copyDir(t, dir)
	srv, err := sqsserver.New(sqsserver.WithDir(cp))
	if err != nil {
		t.Fatalf("run %d: open a copy of the directory: %v", run, err)
	}
	hs := httptest.NewServer(srv)
	defer func() {
		hs.Close()
		srv.Close()
	}()
	c := sqstest.NewClient(hs.URL, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src, dlq, _, err := killQueues(ctx, c)
	if err != nil {
		t.Fatalf("run %d: %v", run, err)
	}
	// Moves stop, so that reading the queues changes nothing but leases.
	if _, err := c.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: &src, Attributes: map[string]string{"RedrivePolicy": ""}}); err != nil {
		t.Fatalf("run %d: %v", run, err)
	}
	where := map[string][]string{}
	for _, q := range []string{src, dlq} {
		for {
			out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &q, MaxNumberOfMessages: 10, VisibilityTimeout: 3600})
			if err != nil {
				t.Fatalf("run %d: %v", run, err)
			}
			if len(out.Messages) == 0 {
				break
			}
			for _, m := range out.Messages {
				body := strings.TrimPrefix(aws.ToString(m.Body), "m")
				where[body] = append(where[body], q[strings.LastIndex(q, "/")+1:])
			}
		}
	}
	for n := range sent {
		if len(where[n]) != 1 {
			t.Errorf("run %d: message %s, whose send returned, is in %v: want exactly one queue", run, n, where[n])
		}
	}
	for n, qs := range where {
		switch {
		case !sending[n]:
			t.Errorf("run %d: message %s was never sent, and is in %v", run, n, qs)
		case len(qs) > 1:
			t.Errorf("run %d: message %s is in %v", run, n, qs)
		}
	}
}

// copyDir copies dir, its subdirectories and files, as a crash left them
// (the LOCK files aside), to a new temporary directory.
func copyDir(t *testing.T, dir string) string {
	t.Helper()
	to := t.TempDir()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		target := filepath.Join(to, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Name() == "LOCK":
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return to
}
