// Package otelleasebus instruments leasebus with OpenTelemetry.
package otelleasebus
