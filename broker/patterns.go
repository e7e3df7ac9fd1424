package broker

import (
	"slices"
	"strings"

	"github.com/leasebus/leasebus/backend"
)

// isPattern reports whether a subscription's topic is a wildcard pattern.
func isPattern(topic string) bool { return strings.ContainsAny(topic, "*>#") }

// validPattern checks a wildcard pattern: dot-separated segments, where
// '*' stands alone for exactly one segment and '>' (or '#') stands alone as
// the last segment for one or more.
func validPattern(p string) error {
	if err := validName("pattern", p); err != nil {
		return err
	}
	segs := strings.Split(p, ".")
	for i, seg := range segs {
		switch {
		case seg == "":
			return backend.Invalid("pattern %q has an empty dot-separated segment", p)
		case seg == ">" || seg == "#":
			if i != len(segs)-1 {
				return backend.Invalid("pattern %q: %q must be the last segment", p, seg)
			}
		case strings.ContainsAny(seg, "*>#") && seg != "*":
			return backend.Invalid("pattern %q: a wildcard must be a whole segment", p)
		}
	}
	return nil
}

// trie holds the pattern subscriptions by segment, so the patterns that
// match a topic are found in one walk down the topic's segments, not by
// trying every pattern.
type trie[T any] struct {
	next map[string]*trie[T]
	star *trie[T]           // '*'
	rest []*Subscription[T] // patterns ending in '>' here
	end  []*Subscription[T] // patterns ending exactly here
}

func (n *trie[T]) insert(segs []string, s *Subscription[T]) {
	for _, seg := range segs {
		switch seg {
		case ">", "#":
			n.rest = append(n.rest, s)
			return
		case "*":
			if n.star == nil {
				n.star = &trie[T]{}
			}
			n = n.star
		default:
			if n.next == nil {
				n.next = make(map[string]*trie[T])
			}
			c := n.next[seg]
			if c == nil {
				c = &trie[T]{}
				n.next[seg] = c
			}
			n = c
		}
	}
	n.end = append(n.end, s)
}

// remove takes s out of the trie. Empty nodes stay; they are cheap and a
// pattern is usually subscribed again.
func (n *trie[T]) remove(segs []string, s *Subscription[T]) {
	drop := func(l []*Subscription[T]) []*Subscription[T] {
		return slices.DeleteFunc(l, func(x *Subscription[T]) bool { return x == s })
	}
	for _, seg := range segs {
		switch seg {
		case ">", "#":
			n.rest = drop(n.rest)
			return
		case "*":
			n = n.star
		default:
			n = n.next[seg]
		}
		if n == nil {
			return
		}
	}
	n.end = drop(n.end)
}

// match appends the subscriptions whose pattern matches topic segments.
func (n *trie[T]) match(segs []string, out []*Subscription[T]) []*Subscription[T] {
	if n == nil {
		return out
	}
	if len(segs) == 0 {
		return append(out, n.end...)
	}
	out = append(out, n.rest...) // '>' matches one or more remaining segments
	out = n.next[segs[0]].match(segs[1:], out)
	return n.star.match(segs[1:], out)
}
