// Package browsertest drives leasebus's console demo (examples/console) in
// a real headless Chromium, as a person would: it finds why an order died,
// fixes its payload and redrives it, watches billing ack it, discards
// another dead letter, and pauses, resumes and purges a subscription,
// saving a screenshot of each page. It is a module of its own so that the
// core module never requires chromedp.
//
// It needs Chromium (Debian's chromium package; LEASEBUS_CHROMIUM names
// another binary). Without one it skips, unless LEASEBUS_BROWSER=required,
// as .ci/run sets. LEASEBUS_SCREENSHOTS names a directory to keep the
// screenshots in (by default the test's temporary directory).
package browsertest
