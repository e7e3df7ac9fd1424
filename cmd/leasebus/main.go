// Command leasebus looks inside a durable broker's directory, and acts on
// it: the on-call engineer's tool when a batch job or service stops with
// dead letters and no one wrote a program to read them.
//
// Reading takes no lock and changes no byte (broker.OpenCopy), so it works
// while the process that owns the directory runs:
//
//	leasebus inspect DIR                      topics, subscriptions and their depth, dead letters
//	leasebus peek [-state S] [-limit N] [-after SEQ] DIR TOPIC SUBSCRIPTION
//	leasebus dead-letters [filter] DIR        the dead letters, whole
//	leasebus export DIR                       every message and dead letter, as JSON lines
//	leasebus console [-addr A] DIR            the console, read-only, over a fresh copy at each page
//	leasebus console -write [-addr A] DIR     the console with its actions (takes the lock)
//
// Changing takes the directory's lock (broker.Open), so the owner must be
// stopped first; opening it counts the owner's leases as expired, as the
// owner's own restart would (one on its last attempt is dead-lettered).
// Each says what it did:
//
//	leasebus redrive [filter] DIR             put dead letters back on their subscriptions
//	leasebus redrive -payload FILE -ref REF DIR
//	                                          put one back with a corrected payload
//	leasebus discard [filter] DIR             remove dead letters for good
//	leasebus salvage DIR                      keep a damaged journal's readable records
//
// A filter is -subscription, -reason, -error (a substring of the last
// error), -key and -since/-until (RFC 3339); redrive and discard need one,
// or -all. Payloads are shown as the owner's codec wrote them: JSON as
// JSON, other UTF-8 as text, anything else as base64.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// errUsage marks an error in the command line: run prints the usage.
var errUsage = errors.New("usage")

type command struct {
	summary string
	run     func(args []string, out io.Writer) error
}

var commands = map[string]command{
	"inspect":      {"topics, subscriptions and their depth, dead letters", inspect},
	"peek":         {"the messages a subscription holds, leasing none", peek},
	"dead-letters": {"the dead letters, whole", deadLetters},
	"export":       {"every message and dead letter as JSON lines", export},
	"console":      {"serve the console over the directory (read-only)", serveConsole},
	"redrive":      {"put dead letters back (takes the lock)", redrive},
	"discard":      {"remove dead letters for good (takes the lock)", discard},
	"salvage":      {"keep a damaged journal's readable records (takes the lock)", salvage},
}

// run runs the command line args and returns the exit status: 0, 1 for
// a failure, 2 for a bad command line.
func run(args []string, out, errOut io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "help" {
		usage(errOut)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(errOut, "leasebus: unknown command %q\n", args[0])
		usage(errOut)
		return 2
	}
	if err := c.run(args[1:], out); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(errOut, "leasebus %s: %v\n", args[0], err)
		if errors.Is(err, errUsage) {
			return 2
		}
		return 1
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: leasebus COMMAND [flags] DIR [args]")
	fmt.Fprintln(w)
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-13s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Reading takes no lock and works while the directory's owner runs; redrive, discard")
	fmt.Fprintln(w, "and salvage take the lock. 'leasebus COMMAND -h' shows a command's flags.")
}

// parse parses a command's flags and returns its positional arguments,
// which must number want.
func parse(fs *flag.FlagSet, args []string, want ...string) ([]string, error) {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stderr)
			fmt.Fprintf(os.Stderr, "usage: leasebus %s [flags] %s\n", fs.Name(), strings.Join(want, " "))
			fs.PrintDefaults()
			return nil, err
		}
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() != len(want) {
		return nil, fmt.Errorf("%w: leasebus %s [flags] %s (got %d arguments)", errUsage, fs.Name(), strings.Join(want, " "), fs.NArg())
	}
	return fs.Args(), nil
}
