// Package queue is leasebus's vocabulary: the messages, deliveries and dead
// letters a consumer reads, the statistics, priorities, reasons, retry and
// overflow policies it configures, the errors it matches with errors.Is,
// and the codecs that turn payloads into bytes. The broker (package broker) and
// the worker pool (package poller) speak it; every backend does too.
package queue
