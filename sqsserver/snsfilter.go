package sqsserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// A filterPolicy is an SNS subscription's FilterPolicy, compiled: every key
// must match (and each "$or" must have a branch that does); a key matches
// when one of its conditions matches one of its values. On message
// attributes a key is an attribute's name; on the message body (scope
// MessageBody) keys nest as the JSON does.
type filterPolicy struct {
	keys []filterKey
	ors  [][]*filterPolicy
}

type filterKey struct {
	name   string
	conds  []condition   // a leaf: any of them
	nested *filterPolicy // an object (body scope)
}

type condKind uint8

const (
	condExact       condKind = iota // a string, a number, a boolean or null, as JSON has it
	condPrefix                      // {"prefix": "x"}
	condSuffix                      // {"suffix": "x"}
	condIgnoreCase                  // {"equals-ignore-case": "x"}
	condAnythingBut                 // {"anything-but": …}: present, and none of these
	condNumeric                     // {"numeric": [op, n, …]}
	condExists                      // {"exists": true|false}
)

type condition struct {
	kind   condKind
	value  any         // condExact: string, float64, bool or nil; prefix, suffix, ignore-case: string; exists: bool
	not    []condition // condAnythingBut: the values (exact, prefix or suffix) it excludes
	ranges []numRange  // condNumeric: all must hold
}

type numRange struct {
	op string
	n  float64
}

var errPolicy = errors.New("filter policy")

// parseFilterPolicy compiles a FilterPolicy's JSON.
func parseFilterPolicy(text string) (*filterPolicy, error) {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%w: not JSON: %v", errPolicy, err)
	}
	obj, ok := v.(map[string]any)
	if !ok || len(obj) == 0 {
		return nil, fmt.Errorf("%w: must be a JSON object with at least one key", errPolicy)
	}
	return compilePolicy(obj)
}

func compilePolicy(obj map[string]any) (*filterPolicy, error) {
	p := &filterPolicy{}
	for name, v := range obj {
		if name == "$or" {
			branches, ok := v.([]any)
			if !ok || len(branches) < 2 {
				return nil, fmt.Errorf("%w: $or takes an array of at least two objects", errPolicy)
			}
			var or []*filterPolicy
			for _, b := range branches {
				bo, ok := b.(map[string]any)
				if !ok {
					return nil, fmt.Errorf("%w: $or takes objects", errPolicy)
				}
				sub, err := compilePolicy(bo)
				if err != nil {
					return nil, err
				}
				or = append(or, sub)
			}
			p.ors = append(p.ors, or)
			continue
		}
		switch x := v.(type) {
		case map[string]any:
			sub, err := compilePolicy(x)
			if err != nil {
				return nil, err
			}
			p.keys = append(p.keys, filterKey{name: name, nested: sub})
		case []any:
			if len(x) == 0 {
				return nil, fmt.Errorf("%w: %s has an empty array", errPolicy, name)
			}
			k := filterKey{name: name}
			for _, c := range x {
				cond, err := compileCondition(c)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", name, err)
				}
				k.conds = append(k.conds, cond)
			}
			p.keys = append(p.keys, k)
		default:
			return nil, fmt.Errorf("%w: %s must be an array of conditions (or an object, on the message body)", errPolicy, name)
		}
	}
	return p, nil
}

func compileCondition(c any) (condition, error) {
	switch x := c.(type) {
	case string, bool, nil:
		return condition{kind: condExact, value: x}, nil
	case json.Number:
		f, err := x.Float64()
		return condition{kind: condExact, value: f}, err
	case map[string]any:
		if len(x) != 1 {
			return condition{}, fmt.Errorf("%w: an operator object has one key", errPolicy)
		}
		for op, arg := range x {
			switch op {
			case "prefix", "suffix", "equals-ignore-case":
				s, ok := arg.(string)
				if !ok || s == "" {
					return condition{}, fmt.Errorf("%w: %s takes a string", errPolicy, op)
				}
				kind := map[string]condKind{"prefix": condPrefix, "suffix": condSuffix, "equals-ignore-case": condIgnoreCase}[op]
				return condition{kind: kind, value: s}, nil
			case "exists":
				b, ok := arg.(bool)
				if !ok {
					return condition{}, fmt.Errorf("%w: exists takes true or false", errPolicy)
				}
				return condition{kind: condExists, value: b}, nil
			case "anything-but":
				return compileAnythingBut(arg)
			case "numeric":
				return compileNumeric(arg)
			}
			return condition{}, fmt.Errorf("%w: unknown operator %q", errPolicy, op)
		}
	}
	return condition{}, fmt.Errorf("%w: a condition is a string, a number, a boolean, null or an operator object", errPolicy)
}

func compileAnythingBut(arg any) (condition, error) {
	c := condition{kind: condAnythingBut}
	items := []any{arg}
	if list, ok := arg.([]any); ok {
		items = list
	}
	for _, it := range items {
		switch x := it.(type) {
		case string:
			c.not = append(c.not, condition{kind: condExact, value: x})
		case json.Number:
			f, err := x.Float64()
			if err != nil {
				return c, err
			}
			c.not = append(c.not, condition{kind: condExact, value: f})
		case map[string]any:
			inner, err := compileCondition(x)
			if err != nil || (inner.kind != condPrefix && inner.kind != condSuffix) {
				return c, fmt.Errorf("%w: anything-but takes values, or a prefix or suffix", errPolicy)
			}
			c.not = append(c.not, inner)
		default:
			return c, fmt.Errorf("%w: anything-but takes strings or numbers", errPolicy)
		}
	}
	return c, nil
}

func compileNumeric(arg any) (condition, error) {
	list, ok := arg.([]any)
	if !ok || len(list) == 0 || len(list)%2 != 0 || len(list) > 4 {
		return condition{}, fmt.Errorf("%w: numeric takes [op, n] or [op, n, op, n]", errPolicy)
	}
	c := condition{kind: condNumeric}
	for i := 0; i < len(list); i += 2 {
		op, _ := list[i].(string)
		num, ok := list[i+1].(json.Number)
		if !ok {
			return c, fmt.Errorf("%w: numeric compares with numbers", errPolicy)
		}
		f, err := num.Float64()
		if err != nil {
			return c, err
		}
		switch op {
		case "=", "<", "<=", ">", ">=":
		default:
			return c, fmt.Errorf("%w: numeric operator %q is not one of = < <= > >=", errPolicy, op)
		}
		c.ranges = append(c.ranges, numRange{op, f})
	}
	return c, nil
}

// lookup reads a message's attributes, or a JSON object of its body, as a
// filter policy sees them. values returns the values at a key (nil and
// false: the key is absent); a value is a string, a float64, a bool, nil
// (JSON null) or, on the body, a nested object for a nested policy. exists
// reports whether the key holds a leaf value that is neither null nor
// empty, what "exists": true asks (AWS: exists works on leaf nodes only,
// and needs a non-null, non-empty value). none says the message has no
// attribute or field at all, where "exists": false matches nothing (AWS:
// it matches only if at least one attribute is present).
type lookup struct {
	values func(name string) (vals []any, present bool)
	exists func(name string) bool
	none   bool
}

func (p *filterPolicy) matches(get lookup) bool {
	for _, k := range p.keys {
		vals, present := get.values(k.name)
		if k.nested != nil {
			if !present || !k.nested.matchesAny(vals) {
				return false
			}
			continue
		}
		if !k.matches(get, vals, present) {
			return false
		}
	}
	for _, or := range p.ors {
		ok := false
		for _, b := range or {
			if b.matches(get) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// matchesAny reports whether some object among vals matches p.
func (p *filterPolicy) matchesAny(vals []any) bool {
	for _, v := range vals {
		if obj, ok := v.(map[string]any); ok && p.matches(bodyLookup(obj)) {
			return true
		}
	}
	return false
}

func (k filterKey) matches(get lookup, vals []any, present bool) bool {
	for _, c := range k.conds {
		if c.kind == condExists {
			want := c.value.(bool)
			if has := get.exists(k.name); (want && has) || (!want && !has && !get.none) {
				return true
			}
			continue
		}
		if !present {
			continue
		}
		for _, v := range vals {
			if c.matches(v) {
				return true
			}
		}
	}
	return false
}

func (c condition) matches(v any) bool {
	switch c.kind {
	case condExact:
		switch want := c.value.(type) {
		case float64:
			f, ok := number(v)
			return ok && f == want
		default:
			return v == want
		}
	case condPrefix, condSuffix, condIgnoreCase:
		s, ok := v.(string)
		if !ok {
			return false
		}
		w := c.value.(string)
		return (c.kind == condPrefix && strings.HasPrefix(s, w)) || (c.kind == condSuffix && strings.HasSuffix(s, w)) ||
			(c.kind == condIgnoreCase && strings.EqualFold(s, w))
	case condAnythingBut:
		for _, n := range c.not {
			if n.matches(v) {
				return false
			}
		}
		return true
	case condNumeric:
		f, ok := number(v)
		if !ok {
			return false
		}
		for _, r := range c.ranges {
			if !r.holds(f) {
				return false
			}
		}
		return true
	}
	return false
}

func (r numRange) holds(f float64) bool {
	switch r.op {
	case "=":
		return f == r.n
	case "<":
		return f < r.n
	case "<=":
		return f <= r.n
	case ">":
		return f > r.n
	}
	return f >= r.n
}

func number(v any) (float64, bool) {
	f, ok := v.(float64)
	return f, ok && !math.IsNaN(f)
}

// attributeLookup reads a message's attributes as a filter policy sees
// them: a String's value, a Number's as a number, a String.Array's
// elements; a Binary one is present but matches no value.
func attributeLookup(attrs map[string]snsAttributeValue) lookup {
	values := func(name string) ([]any, bool) {
		a, ok := attrs[name]
		if !ok {
			return nil, false
		}
		s := ""
		if a.StringValue != nil {
			s = *a.StringValue
		}
		switch base, _, _ := strings.Cut(a.DataType, "."); {
		case a.DataType == "String.Array":
			var arr []any
			if jsonValues([]byte(s), &arr) != nil {
				return nil, true
			}
			return flatten(arr), true
		case base == "Number":
			f, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return nil, true
			}
			return []any{f}, true
		case base == "String":
			return []any{s}, true
		}
		return nil, true
	}
	exists := func(name string) bool {
		a, ok := attrs[name]
		return ok && (len(a.BinaryValue) > 0 || (a.StringValue != nil && *a.StringValue != ""))
	}
	return lookup{values: values, exists: exists, none: len(attrs) == 0}
}

// bodyLookup reads a JSON object of the message body.
func bodyLookup(obj map[string]any) lookup {
	values := func(name string) ([]any, bool) {
		v, ok := obj[name]
		if !ok {
			return nil, false
		}
		return flatten([]any{v}), true
	}
	exists := func(name string) bool {
		vals, _ := values(name)
		for _, v := range vals {
			switch v := v.(type) {
			case nil, map[string]any: // null; an intermediate node
			case string:
				if v != "" {
					return true
				}
			default:
				return true
			}
		}
		return false
	}
	return lookup{values: values, exists: exists, none: len(obj) == 0}
}

// flatten spreads arrays (a key whose value is an array matches by any
// element) and turns JSON numbers into float64.
func flatten(vals []any) []any {
	var out []any
	for _, v := range vals {
		switch x := v.(type) {
		case []any:
			out = append(out, flatten(x)...)
		case json.Number:
			f, err := x.Float64()
			if err == nil {
				out = append(out, f)
			}
		default:
			out = append(out, x)
		}
	}
	return out
}

// jsonValues decodes JSON keeping numbers exact (json.Number).
func jsonValues(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return dec.Decode(v)
}
