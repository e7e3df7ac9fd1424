package sqsserver

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
)

// moveTask is a StartMessageMoveTask's record. A task runs to its end
// within the call that starts it (see the README): it is COMPLETED, or
// FAILED with the reason, by the time the TaskHandle is returned.
type moveTask struct {
	handle  string
	entry   moveTaskEntry
	started time.Time
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
	entry := moveTaskEntry{
		Status:                            "RUNNING",
		SourceArn:                         *in.SourceArn,
		MaxNumberOfMessagesPerSecond:      in.MaxNumberOfMessagesPerSecond,
		ApproximateNumberOfMessagesToMove: int64(src.visible(now)),
		StartedTimestamp:                  now.UnixMilli(),
	}
	if dst != nil {
		entry.DestinationArn = *in.DestinationArn
	}
	moved, stuck := s.move(rc, src, dst, now)
	entry.ApproximateNumberOfMessagesMoved = moved
	entry.Status = "COMPLETED"
	if stuck > 0 {
		entry.Status = "FAILED"
		entry.FailureReason = fmt.Sprintf("%d messages could not be moved: their source queue no longer exists or refused them; they stay in the dead-letter queue.", stuck)
	}
	h, _ := json.Marshal(map[string]string{"taskId": uuid.NewString(), "sourceArn": *in.SourceArn})
	t := &moveTask{handle: base64.RawURLEncoding.EncodeToString(h), entry: entry, started: now}
	s.mu.Lock()
	s.tasks = append(s.tasks, t)
	if len(s.tasks) > maxTasks {
		s.tasks = slices.Delete(s.tasks, 0, len(s.tasks)-maxTasks)
	}
	s.mu.Unlock()
	return startMoveTaskOutput{TaskHandle: t.handle}, nil
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

// move moves every message visible on src now to dst, or (dst nil) to the
// queue each came from, and returns how many it moved and how many it
// could not (released back to src, their receive not counted).
func (s *Server) move(rc *request, src, dst *sqsQueue, now time.Time) (moved, stuck int64) {
	var held []delivery
	defer func() {
		for _, d := range held {
			_ = src.sub.Release(d.LeaseID)
		}
	}()
	for {
		ds := src.sub.TryPoll(maxBatchEntries)
		if len(ds) == 0 {
			return moved, int64(len(held))
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
			if to == nil || !s.republish(rc.ctx(), to, d.Message, m, now) {
				held = append(held, d)
				continue
			}
			_ = src.sub.Ack(d.LeaseID)
			src.forget(d.LeaseID.Seq())
			moved++
		}
	}
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
	s.mu.RLock()
	defer s.mu.RUnlock()
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
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, t := range s.tasks {
		if t.handle == *in.TaskHandle {
			return nil, kResourceNotFound.new("The task is %s: only a RUNNING task can be cancelled (this server's tasks finish within StartMessageMoveTask).", t.entry.Status)
		}
	}
	return nil, kResourceNotFound.new("Task does not exist.")
}
