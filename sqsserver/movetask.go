package sqsserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/leasebus/leasebus/backend"
)

// moveTask is a StartMessageMoveTask's record. A task without
// MaxNumberOfMessagesPerSecond moves what the source holds within the call
// that starts it (it is COMPLETED, or FAILED with the reason, when the
// TaskHandle is returned); one with a rate moves that many messages at
// once and as many more at each second of the server's clock after, in
// the background, until it has moved what the source held at the start,
// the source is empty, or CancelMessageMoveTask stops it. Its progress is
// settled from the clock's reading by every request (so a test that moves
// a mock clock sees the exact count at once) and by a wake-up armed on the
// clock for when no one asks.
type moveTask struct {
	handle  string
	entry   moveTaskEntry // guarded by Server.taskMu once the task is listed
	started time.Time
	src     *sqsQueue
	dst     *sqsQueue // nil: back to each message's source
	rate    int64     // messages a second; 0: all at once
	stuck   int64     // messages it could not move
	stop    chan struct{}
}

const maxTasks = 1000 // task records kept, the oldest dropped first

func startMessageMoveTask(rc *request, in *startMoveTaskInput) (any, error) {
	s := rc.s
	if in.SourceArn == nil || *in.SourceArn == "" {
		return nil, kMissingParameter.new("The request must contain the parameter SourceArn.")
	}
	srcName, ok := s.nameOfARN(*in.SourceArn)
	if !ok {
		return nil, kResourceNotFound.new("The resource that you specified for the SourceArn parameter doesn't exist.")
	}
	src, err := s.queue(srcName)
	if err != nil {
		return nil, kResourceNotFound.new("The resource that you specified for the SourceArn parameter doesn't exist.")
	}
	var dst *sqsQueue
	if in.DestinationArn != nil && *in.DestinationArn != "" {
		name, ok := s.nameOfARN(*in.DestinationArn)
		if ok {
			dst, _ = s.queue(name)
		}
		if dst == nil {
			return nil, kResourceNotFound.new("The resource that you specified for the DestinationArn parameter doesn't exist.")
		}
		if dst == src {
			return nil, kInvalidParameterValue.new("The DestinationArn must not be the SourceArn.")
		}
	}
	if p := in.MaxNumberOfMessagesPerSecond; p != nil && (*p < 1 || *p > 500) {
		return nil, kInvalidParameterValue.new("Value %d for parameter MaxNumberOfMessagesPerSecond is invalid. Reason: must be between 1 and 500.", *p)
	}
	if !s.isDeadLetterQueue(*in.SourceArn) {
		return nil, kInvalidParameterValue.new("Source queue must be configured as a Dead Letter Queue.")
	}

	now := s.clock.Now()
	t := &moveTask{started: now, src: src, dst: dst, stop: make(chan struct{})}
	t.entry = moveTaskEntry{
		Status:                            "RUNNING",
		SourceArn:                         *in.SourceArn,
		MaxNumberOfMessagesPerSecond:      in.MaxNumberOfMessagesPerSecond,
		ApproximateNumberOfMessagesToMove: int64(src.visible(now)),
		StartedTimestamp:                  now.UnixMilli(),
	}
	if in.MaxNumberOfMessagesPerSecond != nil {
		t.rate = int64(*in.MaxNumberOfMessagesPerSecond)
	}
	if dst != nil {
		t.entry.DestinationArn = *in.DestinationArn
	}
	h, _ := json.Marshal(map[string]string{"taskId": uuid.NewString(), "sourceArn": *in.SourceArn})
	t.handle = base64.RawURLEncoding.EncodeToString(h)

	s.taskMu.Lock()
	defer s.taskMu.Unlock()
	for _, old := range s.tasks {
		if old.src == src && old.entry.Status == "RUNNING" {
			return nil, kInvalidParameterValue.new("There is already a task running. Only one active task is allowed for a source queue arn at a given time.")
		}
	}
	s.tasks = append(s.tasks, t)
	if len(s.tasks) > maxTasks {
		s.tasks = slices.Delete(s.tasks, 0, len(s.tasks)-maxTasks)
	}
	s.advanceLocked(t, now)
	if t.entry.Status == "RUNNING" {
		s.running.Add(1)
		go s.runTask(t)
	}
	return startMoveTaskOutput{TaskHandle: t.handle}, nil
}

// advanceTasks settles every running task at the clock's now. It costs a
// load when none runs.
func (s *Server) advanceTasks() {
	if s.running.Load() == 0 {
		return
	}
	now := s.clock.Now()
	s.taskMu.Lock()
	defer s.taskMu.Unlock()
	for _, t := range s.tasks {
		if t.entry.Status == "RUNNING" {
			s.advanceLocked(t, now)
		}
	}
}

// advanceLocked moves what t is due to have moved by now, and ends it when
// it is done. Called with taskMu held.
func (s *Server) advanceLocked(t *moveTask, now time.Time) {
	done := &t.entry.ApproximateNumberOfMessagesMoved
	due := t.entry.ApproximateNumberOfMessagesToMove
	if t.rate > 0 {
		steps := int64(now.Sub(t.started)/time.Second) + 1
		due = min(due, t.rate*steps)
	}
	if want := due - *done - t.stuck; want > 0 {
		moved, stuck, empty := s.move(context.Background(), t.src, t.dst, now, want)
		*done += moved
		t.stuck += stuck
		if empty {
			due = *done + t.stuck // nothing more to move
			t.entry.ApproximateNumberOfMessagesToMove = min(t.entry.ApproximateNumberOfMessagesToMove, due)
		}
	}
	if *done+t.stuck < t.entry.ApproximateNumberOfMessagesToMove {
		return
	}
	t.entry.Status = "COMPLETED"
	if t.stuck > 0 {
		t.entry.Status = "FAILED"
		t.entry.FailureReason = fmt.Sprintf("%d messages could not be moved: their source queue no longer exists or refused them; they stay in the dead-letter queue.", t.stuck)
	}
	t.end()
}

// end stops t's wake-ups (its goroutine returns).
func (t *moveTask) end() {
	select {
	case <-t.stop:
	default:
		close(t.stop)
	}
}

// runTask wakes a running task at each second of the clock until it
// ends, or the server closes.
func (s *Server) runTask(t *moveTask) {
	defer s.running.Add(-1)
	for step := int64(1); ; step++ {
		wake := backend.At(s.clock, t.started.Add(time.Duration(step)*time.Second))
		select {
		case <-wake.C:
			wake.Stop()
			s.advanceTasks()
		case <-t.stop:
			wake.Stop()
			return
		case <-s.stopped:
			wake.Stop()
			return
		}
	}
}

// isDeadLetterQueue reports whether some queue's RedrivePolicy names arn.
func (s *Server) isDeadLetterQueue(arn string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, q := range s.queues {
		if p := q.settings().redrive; p != nil && p.DeadLetterTargetArn == arn {
			return true
		}
	}
	return false
}

// move moves up to limit messages visible on src now to dst, or (dst nil)
// to the queue each came from, and returns how many it moved, how many it
// could not (released back to src, their receive not counted), and
// whether src had nothing more to take.
func (s *Server) move(ctx context.Context, src, dst *sqsQueue, now time.Time, limit int64) (moved, stuck int64, empty bool) {
	var held []delivery
	defer func() {
		for _, d := range held {
			_ = src.sub.Release(d.LeaseID)
		}
	}()
	for moved+int64(len(held)) < limit {
		ds := src.sub.TryPoll(int(min(maxBatchEntries, limit-moved-int64(len(held)))))
		if len(ds) == 0 {
			return moved, int64(len(held)), true
		}
		for _, d := range ds {
			if src.takeDeleted(d) {
				_ = src.sub.Ack(d.LeaseID) // deleted after a reset: gone
				continue
			}
			to := dst
			if to == nil {
				if name, ok := s.nameOfARN(d.Payload.SourceArn); ok {
					to, _ = s.queue(name)
				}
			}
			m := d.Payload
			m.SourceArn = ""
			if to == nil || !s.moveTo(ctx, src, d, to, m, now) {
				held = append(held, d)
				continue
			}
			moved++
		}
	}
	return moved, int64(len(held)), false
}

func listMessageMoveTasks(rc *request, in *listMoveTasksInput) (any, error) {
	s := rc.s
	if in.SourceArn == nil || *in.SourceArn == "" {
		return nil, kMissingParameter.new("The request must contain the parameter SourceArn.")
	}
	if name, ok := s.nameOfARN(*in.SourceArn); !ok {
		return nil, kResourceNotFound.new("The resource that you specified for the SourceArn parameter doesn't exist.")
	} else if _, err := s.queue(name); err != nil {
		return nil, kResourceNotFound.new("The resource that you specified for the SourceArn parameter doesn't exist.")
	}
	limit := 1
	if p := in.MaxResults; p != nil {
		if *p < 1 || *p > 10 {
			return nil, kInvalidParameterValue.new("Value %d for parameter MaxResults is invalid. Reason: must be between 1 and 10.", *p)
		}
		limit = *p
	}
	out := listMoveTasksOutput{Results: []moveTaskEntry{}}
	s.advanceTasks()
	s.taskMu.Lock()
	defer s.taskMu.Unlock()
	for i := len(s.tasks) - 1; i >= 0 && len(out.Results) < limit; i-- {
		if t := s.tasks[i]; t.entry.SourceArn == *in.SourceArn {
			e := t.entry
			if e.Status == "RUNNING" {
				e.TaskHandle = t.handle // SQS gives the handle of a running task only
			}
			out.Results = append(out.Results, e)
		}
	}
	return out, nil
}

func cancelMessageMoveTask(rc *request, in *cancelMoveTaskInput) (any, error) {
	if in.TaskHandle == nil || *in.TaskHandle == "" {
		return nil, kMissingParameter.new("The request must contain the parameter TaskHandle.")
	}
	s := rc.s
	s.advanceTasks()
	s.taskMu.Lock()
	defer s.taskMu.Unlock()
	for _, t := range s.tasks {
		if t.handle != *in.TaskHandle {
			continue
		}
		if t.entry.Status != "RUNNING" {
			return nil, kResourceNotFound.new("The task is %s: only a RUNNING task can be cancelled.", t.entry.Status)
		}
		t.entry.Status = "CANCELLED"
		t.end()
		return cancelMoveTaskOutput{ApproximateNumberOfMessagesMoved: t.entry.ApproximateNumberOfMessagesMoved}, nil
	}
	return nil, kResourceNotFound.new("Task does not exist.")
}
