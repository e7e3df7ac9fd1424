module github.com/leasebus/leasebus/console/browsertest

go 1.25

require (
	github.com/chromedp/chromedp v0.23.1
	github.com/leasebus/leasebus v0.1.0
)

require (
	github.com/chromedp/cdproto v0.160.1 // indirect
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
)
