package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/console"
	"github.com/leasebus/leasebus/internal/journal"
	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/schedule"
)

// openCopy opens a copy of dir: payloads as the owner's codec wrote them.
func openCopy(dir string) (*broker.Broker[[]byte], error) {
	return broker.OpenCopy(dir, queue.BytesCodec())
}

func inspect(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	schedules := fs.String("schedules", "", "also show the last slot of each schedule in this schedule.FileStore file")
	pos, err := parse(fs, args, "DIR")
	if err != nil {
		return err
	}
	b, err := openCopy(pos[0])
	if err != nil {
		return err
	}
	defer b.Close()
	info := b.Recovery()
	letters := b.DeadLetters()
	fmt.Fprintf(out, "%s: %s, %s, %s, %s\n", pos[0], count(info.Topics, "topic"), count(info.Subscriptions, "subscription"),
		count(info.Messages, "message"), count(len(letters), "dead letter"))
	fmt.Fprintln(out, ownerNote(pos[0]))
	if info.TruncatedBytes > 0 {
		fmt.Fprintf(out, "(%d bytes at the journal's end were being written, or are torn: left out)\n", info.TruncatedBytes)
	}
	fmt.Fprintf(out, "topics: %s\n\n", strings.Join(b.Topics(), ", "))

	byReason := map[[2]string]map[string]int{} // by subscription: name and topic
	for _, dl := range letters {
		k := [2]string{dl.Subscription, dl.Topic}
		if byReason[k] == nil {
			byReason[k] = map[string]int{}
		}
		byReason[k][dl.Reason.String()]++
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "TOPIC\tSUBSCRIPTION\tHELD\tVISIBLE\tIN FLIGHT\tDELAYED\tHELD BACK\tOLDEST VISIBLE\tDEAD LETTERS\t")
	for _, s := range b.AllSubscriptions() {
		st := s.Stats()
		age := "-"
		if st.OldestVisibleAge > 0 {
			age = st.OldestVisibleAge.Round(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t\n", s.Topic(), s.Name(),
			st.Visible+st.Delayed+st.InFlight+st.HeldBack, st.Visible, st.InFlight, st.Delayed, st.HeldBack, age,
			reasons(byReason[[2]string{s.Name(), s.Topic()}]))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range b.AllSubscriptions() {
		if l := limits(s.Config()); l != "" {
			fmt.Fprintf(out, "%s %s paces its deliveries: %s\n", s.Topic(), s.Name(), l)
		}
	}
	if *schedules != "" {
		if err := inspectSchedules(*schedules, out); err != nil {
			return err
		}
	}
	if len(letters) > 0 {
		fmt.Fprintf(out, "\n'leasebus dead-letters %s' shows them.\n", pos[0])
	}
	return nil
}

// inspectSchedules prints the last slot of each schedule of a FileStore:
// what a restarted scheduler carries on after. (A schedule's spec is in
// its program: the console and otelleasebus show the next fire.)
func inspectSchedules(path string, out io.Writer) error {
	if _, err := os.Stat(path); err != nil {
		return err
	}
	st, err := schedule.NewFileStore(path)
	if err != nil {
		return err
	}
	slots, err := st.Slots()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nschedules in %s (the last slot each handled: a restart carries on after it):\n", path)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCHEDULE\tLAST SLOT\t")
	for _, name := range slices.Sorted(maps.Keys(slots)) {
		fmt.Fprintf(tw, "%s\t%s\t\n", name, slots[name].Format(time.RFC3339))
	}
	if len(slots) == 0 {
		fmt.Fprintln(tw, "(none yet)\t\t")
	}
	return tw.Flush()
}

// limits says a subscription's flow control, "" for none.
func limits(c queue.Config) string {
	var parts []string
	if !c.RateLimit.IsZero() {
		parts = append(parts, fmt.Sprintf("at most %d per %v", c.RateLimit.N, c.RateLimit.Per))
	}
	if !c.KeyRateLimit.IsZero() {
		parts = append(parts, fmt.Sprintf("at most %d per %v a key", c.KeyRateLimit.N, c.KeyRateLimit.Per))
	}
	if c.KeyConcurrency > 1 {
		parts = append(parts, fmt.Sprintf("%d of a key at once", c.KeyConcurrency))
	}
	if c.FairKeys {
		parts = append(parts, "keys take turns")
	}
	return strings.Join(parts, ", ")
}

func reasons(m map[string]int) string {
	if len(m) == 0 {
		return "0"
	}
	n := 0
	var parts []string
	for r, k := range m {
		n += k
		parts = append(parts, fmt.Sprintf("%s %d", r, k))
	}
	sort.Strings(parts)
	return fmt.Sprintf("%d (%s)", n, strings.Join(parts, ", "))
}

func peek(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("peek", flag.ContinueOnError)
	state := fs.String("state", "any", "only messages in this state: visible, delayed, in-flight, held-back")
	limit := fs.Int("limit", 50, "at most this many (1 to 1000)")
	after := fs.Uint64("after", 0, "only messages after this seq (the last seq of the page before)")
	asJSON := fs.Bool("json", false, "print JSON lines, as export does")
	id := fs.String("id", "", "only the message with this ID")
	key := fs.String("key", "", "only messages with this ordering key")
	pos, err := parse(fs, args, "DIR", "TOPIC", "SUBSCRIPTION")
	if err != nil {
		return err
	}
	var msgID uuid.UUID
	if *id != "" {
		if msgID, err = uuid.Parse(*id); err != nil {
			return fmt.Errorf("%w: -id %q is not a message ID", errUsage, *id)
		}
	}
	st, ok := queue.ParseState(*state)
	if !ok {
		return fmt.Errorf("%w: -state %q is not any, visible, delayed, in-flight or held-back", errUsage, *state)
	}
	b, err := openCopy(pos[0])
	if err != nil {
		return err
	}
	defer b.Close()
	s, err := b.Subscription(pos[1], pos[2])
	if err != nil {
		return err
	}
	q := queue.PeekQuery{State: st, After: *after, Limit: *limit, ID: msgID, Key: *key}
	if q.Limit > 0 && q.Limit < queue.MaxPeek {
		q.Limit++ // one more says whether there is a next page
	}
	held, err := s.Peek(q)
	if err != nil {
		return err
	}
	more := len(held) > *limit || len(held) == queue.MaxPeek
	held = held[:min(len(held), *limit)]
	if *asJSON {
		enc := json.NewEncoder(out)
		for _, h := range held {
			if err := enc.Encode(exportLine{Kind: "message", Topic: s.Topic(), Subscription: s.Name(), Message: ptr(console.NewHeldView(h))}); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tSTATE\tATTEMPTS\tKEY\tPRIORITY\tAT\tLAST ERROR\tPAYLOAD")
	for _, h := range held {
		v := console.NewHeldView(h)
		at := "-"
		if v.At != nil {
			at = v.At.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", v.Seq, v.State, v.Attempts, orDash(v.Key), v.Priority, at,
			orDash(oneLine(v.LastError)), oneLine(v.Payload.Preview))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if more && len(held) > 0 {
		fmt.Fprintf(out, "(more: -after %d)\n", held[len(held)-1].Seq)
	}
	if slices.ContainsFunc(held, func(h queue.Held[[]byte]) bool { return h.State == queue.StateInFlight }) {
		fmt.Fprintln(out, ownerNote(pos[0]))
	}
	return nil
}

// ownerNote says what an in-flight message of dir means: a lease of the
// broker that holds dir, or, with none holding it, nothing (OpenCopy then
// shows leased messages as the next Open brings them back).
func ownerNote(dir string) string {
	switch owned, known := journal.Owned(dir); {
	case !known:
		return "(whether a broker holds it cannot be told here: in-flight messages are leases of its last owner; if it has stopped, the next Open makes them visible again, their attempts spent)"
	case owned:
		return "(a running broker holds it: in-flight messages are its leases)"
	default:
		return "(no broker holds it: shown as the next Open brings it back, messages leased when it stopped visible again with their attempts spent)"
	}
}

// count says n of a thing, with the thing's plural when n is not 1: "1
// dead letter", "2 dead letters".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.Itoa(n) + " " + thing + "s"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine keeps a text to one line of a table, and a terminal's escape
// sequences out of it: a text with a character that is not printable (a
// newline, a tab, an escape) is shown quoted, as %q would.
func oneLine(s string) string {
	if strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}

func ptr[T any](v T) *T { return &v }

// filter is the dead-letter filter flags of dead-letters, redrive and
// discard.
type filter struct {
	sub, topic, reason, errText, key, since, until string
}

func (f *filter) flags(fs *flag.FlagSet) {
	fs.StringVar(&f.sub, "subscription", "", "only this subscription's")
	fs.StringVar(&f.topic, "topic", "", "only of subscriptions on this topic (a pattern subscription: its pattern)")
	fs.StringVar(&f.reason, "reason", "", "only of this reason: max-attempts, overflow, expired, rejected, cancelled")
	fs.StringVar(&f.errText, "error", "", "only those whose last error contains this text")
	fs.StringVar(&f.key, "key", "", "only of this ordering key")
	fs.StringVar(&f.since, "since", "", "only those dead-lettered at or after this time (RFC 3339)")
	fs.StringVar(&f.until, "until", "", "only those dead-lettered before this time (RFC 3339)")
}

func (f *filter) empty() bool { return *f == filter{} }

// match returns the filter as a function; bad values are usage errors.
func (f *filter) match() (func(queue.DeadLetter[[]byte]) bool, error) {
	var since, until time.Time
	for _, t := range []struct {
		name, s string
		dst     *time.Time
	}{{"since", f.since, &since}, {"until", f.until, &until}} {
		if t.s == "" {
			continue
		}
		v, err := time.Parse(time.RFC3339Nano, t.s)
		if err != nil {
			return nil, fmt.Errorf("%w: -%s %q is not an RFC 3339 time", errUsage, t.name, t.s)
		}
		*t.dst = v
	}
	var reason queue.Reason
	if f.reason != "" {
		r, ok := queue.ParseReason(f.reason)
		if !ok {
			return nil, fmt.Errorf("%w: -reason %q is not max-attempts, overflow, expired, rejected or cancelled", errUsage, f.reason)
		}
		reason = r
	}
	return func(dl queue.DeadLetter[[]byte]) bool {
		return (f.sub == "" || dl.Subscription == f.sub) &&
			(f.topic == "" || dl.Topic == f.topic) &&
			(f.reason == "" || dl.Reason == reason) &&
			(f.errText == "" || strings.Contains(dl.LastError, f.errText)) &&
			(f.key == "" || dl.Message.Key == f.key) &&
			(since.IsZero() || !dl.At.Before(since)) &&
			(until.IsZero() || dl.At.Before(until))
	}, nil
}

func deadLetters(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("dead-letters", flag.ContinueOnError)
	var f filter
	f.flags(fs)
	asJSON := fs.Bool("json", false, "print JSON lines, as export does")
	pos, err := parse(fs, args, "DIR")
	if err != nil {
		return err
	}
	match, err := f.match()
	if err != nil {
		return err
	}
	b, err := openCopy(pos[0])
	if err != nil {
		return err
	}
	defer b.Close()
	enc := json.NewEncoder(out)
	n := 0
	for _, dl := range b.DeadLetters() {
		if !match(dl) {
			continue
		}
		n++
		v := console.NewDeadLetterView(dl)
		if *asJSON {
			if err := enc.Encode(exportLine{Kind: "dead-letter", Topic: v.Topic, Subscription: v.Subscription, DeadLetter: &v}); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintf(out, "%s/%s\n  subscription  %s on %s (published to %s)\n  reason        %s after %s, %s\n  last error    %s\n",
			v.ID, v.Subscription, v.Subscription, v.SubscriptionTopic, v.Topic, v.Reason, count(v.Attempts, "attempt"), v.At.UTC().Format(time.RFC3339Nano), oneLine(v.LastError))
		for _, a := range v.History {
			fmt.Fprintf(out, "  attempt %-5d %s at %s, held %v", a.Attempt, a.Outcome, a.At.Format(time.RFC3339Nano), time.Duration(a.HeldSeconds*float64(time.Second)))
			if a.Error != "" {
				fmt.Fprintf(out, ": %s", oneLine(a.Error))
			}
			fmt.Fprintln(out)
		}
		if v.Key != "" {
			fmt.Fprintf(out, "  key           %s\n", oneLine(v.Key))
		}
		for k, val := range v.Headers {
			fmt.Fprintf(out, "  header        %s: %s\n", oneLine(k), oneLine(val))
		}
		fmt.Fprintf(out, "  payload (%s, %d bytes)\n", v.Payload.Kind, v.Payload.Size)
		for _, line := range strings.Split(v.Payload.Text, "\n") {
			fmt.Fprintf(out, "    %s\n", oneLine(line))
		}
		fmt.Fprintln(out)
	}
	if !*asJSON {
		fmt.Fprintln(out, count(n, "dead letter"))
	}
	return nil
}

// exportLine is one line of export (and of peek -json, dead-letters -json).
type exportLine struct {
	Kind         string                  `json:"kind"` // "message" or "dead-letter"
	Topic        string                  `json:"topic"`
	Subscription string                  `json:"subscription"`
	Message      *console.HeldView       `json:"message,omitempty"`
	DeadLetter   *console.DeadLetterView `json:"deadLetter,omitempty"`
}

func export(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("export", flag.ContinueOnError)
	pos, err := parse(fs, args, "DIR")
	if err != nil {
		return err
	}
	b, err := openCopy(pos[0])
	if err != nil {
		return err
	}
	defer b.Close()
	enc := json.NewEncoder(out)
	for _, s := range b.AllSubscriptions() {
		for after := uint64(0); ; {
			page, err := s.Peek(queue.PeekQuery{After: after, Limit: queue.MaxPeek})
			if err != nil {
				return err
			}
			for _, h := range page {
				if err := enc.Encode(exportLine{Kind: "message", Topic: s.Topic(), Subscription: s.Name(), Message: ptr(console.NewHeldView(h))}); err != nil {
					return err
				}
			}
			if len(page) < queue.MaxPeek {
				break
			}
			after = page[len(page)-1].Seq
		}
	}
	for _, dl := range b.DeadLetters() {
		v := console.NewDeadLetterView(dl)
		if err := enc.Encode(exportLine{Kind: "dead-letter", Topic: v.Topic, Subscription: v.Subscription, DeadLetter: &v}); err != nil {
			return err
		}
	}
	return nil
}
