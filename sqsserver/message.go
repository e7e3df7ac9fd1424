package sqsserver

import (
	"fmt"
	"math/big"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// message is the payload the server keeps in leasebus for one SQS message:
// what the sender sent and the system attributes SQS keeps beside it. A
// durable server stores it with queue.JSONCodec.
type message struct {
	Body        string      `json:"b"`
	Attributes  []attribute `json:"a,omitempty"`  // message attributes, sorted by name
	TraceHeader string      `json:"t,omitempty"`  // the AWSTraceHeader system attribute
	MD5         string      `json:"m,omitempty"`  // MD5OfBody
	GroupID     string      `json:"g,omitempty"`  // MessageGroupId
	DedupID     string      `json:"d,omitempty"`  // MessageDeduplicationId (FIFO)
	Sequence    uint64      `json:"q,omitempty"`  // SequenceNumber (FIFO)
	SenderID    string      `json:"u,omitempty"`  // SenderId
	MessageID   string      `json:"id,omitempty"` // the SQS MessageId when it is not the leasebus message's ID (a moved message)
	SentAt      int64       `json:"s,omitempty"`  // the original SentTimestamp (ms) of a moved message
	SourceArn   string      `json:"src,omitempty"`
}

// attribute is one message attribute.
type attribute struct {
	Name     string `json:"n"`
	DataType string `json:"t"`
	String   string `json:"s,omitempty"`
	Binary   []byte `json:"b,omitempty"`
}

func (a attribute) isBinary() bool { return strings.HasPrefix(a.DataType, "Binary") }

func (a attribute) wire() attributeValue {
	if a.isBinary() {
		return attributeValue{DataType: a.DataType, BinaryValue: a.Binary}
	}
	s := a.String
	return attributeValue{DataType: a.DataType, StringValue: &s}
}

func (a attribute) size() int { return len(a.Name) + len(a.DataType) + len(a.String) + len(a.Binary) }

// SQS's limits.
const (
	maxAttributes       = 10
	maxAttributeName    = 256
	maxDataType         = 256
	maxBatchEntries     = 10
	maxBatchEntryID     = 80
	maxGroupOrDedupID   = 128
	maxMessageSizeLimit = 1 << 20 // MaximumMessageSize's ceiling and default (1 MiB, as AWS since 2025), and a batch's total
	maxVisibility       = 43_200  // 12 hours, in seconds
	maxDelay            = 900     // 15 minutes
	maxWait             = 20
	maxQueueName        = 80
	maxTags             = 50
)

// validText reports whether s holds only the characters SQS accepts in a
// message body or a string attribute: #x9 | #xA | #xD | #x20 to #xD7FF |
// #xE000 to #xFFFD | #x10000 to #x10FFFF.
func validText(s string) (bad rune, ok bool) {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[i:]); n <= 1 {
				return r, false
			}
		}
		switch {
		case r == 0x9 || r == 0xA || r == 0xD:
		case r >= 0x20 && r <= 0xD7FF:
		case r >= 0xE000 && r <= 0xFFFD:
		case r >= 0x10000 && r <= 0x10FFFF:
		default:
			return r, false
		}
	}
	return 0, true
}

var (
	attributeNameRE = regexp.MustCompile(`^[A-Za-z0-9_.\-]+$`)
	dataTypeRE      = regexp.MustCompile(`^(String|Number|Binary)(\.[^\x00-\x1f]+)?$`)
	numberRE        = regexp.MustCompile(`^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$`)
	idRE            = regexp.MustCompile(`^[A-Za-z0-9_\-]+$`)
	groupIDRE       = regexp.MustCompile("^[A-Za-z0-9!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~]+$")
	numberMax       = new(big.Rat).SetFrac(new(big.Int).Exp(big.NewInt(10), big.NewInt(126), nil), big.NewInt(1))
	numberMin       = new(big.Rat).SetFrac(big.NewInt(1), new(big.Int).Exp(big.NewInt(10), big.NewInt(128), nil))
)

// parseAttributes checks message attributes as SQS does and returns them
// sorted by name. system says they are MessageSystemAttributes, where
// AWSTraceHeader (a String) is the only name allowed.
func parseAttributes(in map[string]attributeValue, system bool) ([]attribute, error) {
	what := "message attribute"
	if system {
		what = "message system attribute"
	}
	if len(in) > maxAttributes {
		return nil, kInvalidParameterValue.new("Number of %ss [%d] exceeds the allowed maximum [%d].", what, len(in), maxAttributes)
	}
	out := make([]attribute, 0, len(in))
	for name, v := range in {
		if system {
			if name != "AWSTraceHeader" {
				return nil, kInvalidParameterValue.new("Message system attribute name '%s' is invalid.", name)
			}
			if v.DataType != "String" {
				return nil, kInvalidParameterValue.new("The message system attribute 'AWSTraceHeader' must be of type 'String'.")
			}
		} else if err := checkAttributeName(name); err != nil {
			return nil, err
		}
		a, err := checkAttributeValue(what, name, v)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	sortAttributes(out)
	return out, nil
}

func checkAttributeName(name string) error {
	lower := strings.ToLower(name)
	switch {
	case name == "":
		return kInvalidParameterValue.new("The message attribute name must not be empty.")
	case len(name) > maxAttributeName:
		return kInvalidParameterValue.new("Message attribute name '%s' is longer than %d characters.", name, maxAttributeName)
	case !attributeNameRE.MatchString(name):
		return kInvalidParameterValue.new("Message attribute name '%s' has invalid characters: use A-Z, a-z, 0-9, underscore, hyphen and period.", name)
	case strings.HasPrefix(lower, "aws.") || strings.HasPrefix(lower, "amazon."):
		return kInvalidParameterValue.new("Message attribute name '%s' uses a reserved prefix (AWS. or Amazon.).", name)
	case strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") || strings.Contains(name, ".."):
		return kInvalidParameterValue.new("Message attribute name '%s' must not start or end with a period, or have two in a row.", name)
	}
	return nil
}

func checkAttributeValue(what, name string, v attributeValue) (attribute, error) {
	a := attribute{Name: name, DataType: v.DataType}
	switch {
	case v.DataType == "":
		return a, kInvalidParameterValue.new("The %s '%s' must contain non-empty message attribute type.", what, name)
	case len(v.DataType) > maxDataType || !dataTypeRE.MatchString(v.DataType):
		return a, kInvalidParameterValue.new("The type of %s '%s' is invalid: %q. Use String, Number or Binary, optionally followed by a period and a custom type.", what, name, v.DataType)
	case v.StringListValues != nil || v.BinaryListValues != nil:
		return a, kInvalidParameterValue.new("Message attribute list values in SendMessage operation are not supported.")
	}
	if a.isBinary() {
		if v.StringValue != nil {
			return a, kInvalidParameterValue.new("The %s '%s' with type 'Binary' must use field 'Binary'.", what, name)
		}
		if len(v.BinaryValue) == 0 {
			return a, kInvalidParameterValue.new("The %s '%s' must contain a non-empty value of message attribute type '%s'.", what, name, v.DataType)
		}
		a.Binary = v.BinaryValue
		return a, nil
	}
	if v.BinaryValue != nil {
		return a, kInvalidParameterValue.new("The %s '%s' with type '%s' must use field 'String'.", what, name, v.DataType)
	}
	if v.StringValue == nil || *v.StringValue == "" {
		return a, kInvalidParameterValue.new("The %s '%s' must contain a non-empty value of message attribute type '%s'.", what, name, v.DataType)
	}
	a.String = *v.StringValue
	if r, ok := validText(a.String); !ok {
		return a, kInvalidParameterValue.new("The %s '%s' contains the invalid character %U.", what, name, r)
	}
	if strings.HasPrefix(v.DataType, "Number") {
		if err := checkNumber(a.String); err != nil {
			return a, kInvalidParameterValue.new("The %s '%s' with type 'Number' has an invalid value %q: %v.", what, name, a.String, err)
		}
	}
	return a, nil
}

// checkNumber checks an attribute of type Number: a decimal, at most 38
// significant digits, between 10^-128 and 10^126 in magnitude (or zero).
func checkNumber(s string) error {
	if !numberRE.MatchString(s) {
		return fmt.Errorf("not a number")
	}
	mantissa := s
	if i := strings.IndexAny(mantissa, "eE"); i >= 0 {
		mantissa = mantissa[:i]
	}
	digits := strings.TrimLeft(strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, mantissa), "0")
	digits = strings.TrimRight(digits, "0")
	if len(digits) > 38 {
		return fmt.Errorf("more than 38 significant digits")
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return fmt.Errorf("not a number")
	}
	abs := new(big.Rat).Abs(r)
	if abs.Sign() != 0 && (abs.Cmp(numberMax) > 0 || abs.Cmp(numberMin) < 0) {
		return fmt.Errorf("out of the range 10^-128 to 10^126")
	}
	return nil
}

func sortAttributes(as []attribute) {
	slices.SortFunc(as, func(a, b attribute) int { return strings.Compare(a.Name, b.Name) })
}

func attributesSize(as []attribute) int {
	n := 0
	for _, a := range as {
		n += a.size()
	}
	return n
}

// selectAttributes returns the attributes a receive asked for by
// MessageAttributeNames: All or .* for every one, "prefix.*" for those
// whose names start with "prefix.", or exact names.
func selectAttributes(as []attribute, names []string) []attribute {
	if len(as) == 0 || len(names) == 0 {
		return nil
	}
	var out []attribute
	for _, a := range as {
		for _, n := range names {
			if n == "All" || n == ".*" || n == a.Name ||
				(strings.HasSuffix(n, ".*") && strings.HasPrefix(a.Name, n[:len(n)-1])) {
				out = append(out, a)
				break
			}
		}
	}
	return out
}
