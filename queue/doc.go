// Package queue is leasebus's vocabulary: the messages, deliveries and dead
// letters a consumer reads, the statistics, priorities, reasons, retry and
// overflow policies it configures, and the errors it matches with
// errors.Is. The broker (package broker) and
// the worker pool (package poller) speak it; every backend does too.
package queue
