module github.com/leasebus/leasebus

go 1.25

require (
	github.com/benbjohnson/clock v1.3.5
	github.com/google/uuid v1.6.0
)
