package sqsserver

import (
	"bytes"
	"encoding/base64"
	"encoding/xml"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// The query protocol's shapes are the JSON ones (wire.go), named by AWS's
// query rules: a list is flattened under its member's name (AttributeNames
// as AttributeName.1, AttributeName.2, …), a map as numbered Name and Value
// pairs (Key and Value for tags) under its singular name (Attribute.1.Name),
// a batch's entries as <Action>RequestEntry.N.<member>, and in responses a
// list's members as repeated elements of the singular name (<Message>,
// <QueueUrl>), a batch's results as <Action>ResultEntry and
// BatchResultErrorEntry. One reading of the Go types serves both
// directions, so the two protocols share every action's model.
//
// SNS's query protocol (the dialect sns) names lists and maps AWS's other
// way, unflattened: a list as Name.member.N (<Name><member>…</member></Name>),
// a map as Name.entry.N.key and .value (Name and Value for message
// attributes), each under the field's own name.

// dialect says whose query rules apply: SQS's (flattened) or SNS's.
type dialect struct{ sns bool }

var (
	sqsDialect = dialect{}
	snsDialect = dialect{sns: true}
)

// jsonName returns a field's JSON name and whether it has omitempty; ""
// for a field JSON skips.
func jsonName(f reflect.StructField) (string, bool) {
	tag := f.Tag.Get("json")
	if tag == "-" || !f.IsExported() {
		return "", false
	}
	name, opts, _ := strings.Cut(tag, ",")
	if name == "" {
		name = f.Name
	}
	return name, strings.Contains(opts, "omitempty")
}

// field is how the query protocol reads or writes one field of a
// structure: its JSON name, its query name in an action's request or
// response, and whether JSON omits it when zero.
type field struct {
	index     int
	name, key string
	omit      bool
	anonymous bool // an embedded structure, whose fields are the entry's own
	typ       reflect.Type
}

type fieldsKey struct {
	d        dialect
	t        reflect.Type
	action   string
	response bool
}

// fieldCache holds fields' answers: the names depend only on the key, and
// a request should not work them out again for every field.
var fieldCache sync.Map // fieldsKey → []field

// fields returns t's fields that JSON reads or writes, as the query
// protocol names them in action's request (or response).
func (d dialect) fields(t reflect.Type, action string, response bool) []field {
	k := fieldsKey{d, t, action, response}
	if fs, ok := fieldCache.Load(k); ok {
		return fs.([]field)
	}
	var fs []field
	for i := range t.NumField() {
		f := t.Field(i)
		if response && f.Anonymous && f.Type.Kind() == reflect.Struct {
			fs = append(fs, field{index: i, anonymous: true, typ: f.Type})
			continue
		}
		name, omit := jsonName(f)
		if name == "" {
			continue
		}
		fs = append(fs, field{index: i, name: name, key: d.queryName(name, f.Type, action, response), omit: omit, typ: f.Type})
	}
	fieldCache.Store(k, fs)
	return fs
}

// singular is a list's or a map's member name in the query protocol.
func singular(name string) string {
	name = strings.ToUpper(name[:1]) + name[1:] // "tags", "queueUrls"
	return strings.TrimSuffix(name, "s")
}

// entryName is the element name of a list of structures: what a batch
// request's entries or a response's list members are called.
func entryName(field, action string, response bool) string {
	switch {
	case field == "Failed":
		return "BatchResultErrorEntry"
	case field == "Entries":
		return action + "RequestEntry"
	case field == "Successful" || field == "Results":
		return action + "ResultEntry"
	}
	return singular(field) // Messages: Message
}

// mapNames are the names of a map entry's key and value.
func (d dialect) mapNames(member string) (key, value string) {
	switch {
	case member == "Tag":
		return "Key", "Value"
	case d.sns && member != "MessageAttributes":
		return "key", "value"
	}
	return "Name", "Value"
}

// item is the prefix of a list's or map's i-th member.
func (d dialect) item(prefix string, i int, isMap bool) string {
	switch {
	case d.sns && isMap:
		return prefix + ".entry." + strconv.Itoa(i)
	case d.sns:
		return prefix + ".member." + strconv.Itoa(i)
	}
	return prefix + "." + strconv.Itoa(i)
}

var byteSlice = reflect.TypeFor[[]byte]()

// fromForm reads a value of type t (an action's input, or a part of it)
// from form under prefix, as JSON would decode it: present is false when
// the form has nothing for it.
func (d dialect) fromForm(form url.Values, prefix string, t reflect.Type, action string) (v any, present bool, err error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == byteSlice:
		if !form.Has(prefix) {
			return nil, false, nil
		}
		return form.Get(prefix), true, nil // base64, as JSON takes []byte
	case t.Kind() == reflect.String:
		if !form.Has(prefix) {
			return nil, false, nil
		}
		return form.Get(prefix), true, nil
	case t.Kind() == reflect.Int || t.Kind() == reflect.Int64:
		if !form.Has(prefix) {
			return nil, false, nil
		}
		n, err := strconv.ParseInt(form.Get(prefix), 10, 64)
		if err != nil {
			return nil, false, kInvalidParameterValue.new("Value %s for parameter %s is invalid. Reason: must be an integer.", form.Get(prefix), prefix)
		}
		return n, true, nil
	case t.Kind() == reflect.Bool:
		if !form.Has(prefix) {
			return nil, false, nil
		}
		b, err := strconv.ParseBool(form.Get(prefix))
		if err != nil {
			return nil, false, kInvalidParameterValue.new("Value %s for parameter %s is invalid. Reason: must be true or false.", form.Get(prefix), prefix)
		}
		return b, true, nil
	case t.Kind() == reflect.Slice:
		var list []any
		for i := 1; ; i++ {
			item, ok, err := d.fromForm(form, d.item(prefix, i, false), t.Elem(), action)
			if err != nil {
				return nil, false, err
			}
			if !ok {
				break
			}
			list = append(list, item)
		}
		return list, len(list) > 0, nil
	case t.Kind() == reflect.Map:
		keyName, valueName := d.mapNames(prefix[strings.LastIndexByte(prefix, '.')+1:])
		m := map[string]any{}
		for i := 1; ; i++ {
			at := d.item(prefix, i, true) + "."
			if !form.Has(at + keyName) {
				break
			}
			val, _, err := d.fromForm(form, at+valueName, t.Elem(), action)
			if err != nil {
				return nil, false, err
			}
			m[form.Get(at+keyName)] = val
		}
		return m, len(m) > 0, nil
	case t.Kind() == reflect.Struct:
		m := map[string]any{}
		for _, f := range d.fields(t, action, false) {
			key := f.key
			if prefix != "" {
				key = prefix + "." + key
			}
			val, ok, err := d.fromForm(form, key, f.typ, action)
			if err != nil {
				return nil, false, err
			}
			if ok {
				m[f.name] = val
			}
		}
		return m, len(m) > 0, nil
	}
	return nil, false, nil
}

// fromFormInto reads into v (an action's input, or a part of it) what
// fromForm reads, as decoding fromForm's value as JSON would set it, but
// without the JSON: a query protocol request pays for no document built,
// written and read again. It reports whether the form had anything for
// v. TestFromFormIntoAgreesWithJSON holds the two ways together.
func (d dialect) fromFormInto(form url.Values, prefix string, v reflect.Value, action string) (bool, error) {
	t := v.Type()
	if t.Kind() == reflect.Pointer {
		elem := reflect.New(t.Elem())
		ok, err := d.fromFormInto(form, prefix, elem.Elem(), action)
		if ok {
			v.Set(elem)
		}
		return ok, err
	}
	switch {
	case t == byteSlice:
		if !form.Has(prefix) {
			return false, nil
		}
		b, err := base64.StdEncoding.DecodeString(form.Get(prefix))
		if err != nil {
			return false, kSerialization.new("The request body is not the JSON this action takes: %s: %v", prefix, err)
		}
		v.SetBytes(b)
		return true, nil
	case t.Kind() == reflect.String:
		if !form.Has(prefix) {
			return false, nil
		}
		v.SetString(form.Get(prefix))
		return true, nil
	case t.Kind() == reflect.Int || t.Kind() == reflect.Int64 || t.Kind() == reflect.Bool:
		x, ok, err := d.fromForm(form, prefix, t, action)
		if ok {
			v.Set(reflect.ValueOf(x).Convert(t))
		}
		return ok, err
	case t.Kind() == reflect.Slice:
		n := 0
		for i := 1; ; i++ {
			item := reflect.New(t.Elem()).Elem()
			ok, err := d.fromFormInto(form, d.item(prefix, i, false), item, action)
			if err != nil {
				return false, err
			}
			if !ok {
				break
			}
			v.Set(reflect.Append(v, item))
			n++
		}
		return n > 0, nil
	case t.Kind() == reflect.Map:
		keyName, valueName := d.mapNames(prefix[strings.LastIndexByte(prefix, '.')+1:])
		// A key named twice takes its last value, as a JSON object's
		// would; every value's numbers are checked all the same.
		last := map[string]string{}
		var keys []string
		for i := 1; ; i++ {
			at := d.item(prefix, i, true) + "."
			if !form.Has(at + keyName) {
				break
			}
			if _, _, err := d.fromForm(form, at+valueName, t.Elem(), action); err != nil {
				return false, err
			}
			k := form.Get(at + keyName)
			if _, ok := last[k]; !ok {
				keys = append(keys, k)
			}
			last[k] = at + valueName
		}
		if len(keys) == 0 {
			return false, nil
		}
		m := reflect.MakeMapWithSize(t, len(keys))
		for _, k := range keys {
			val := reflect.New(t.Elem()).Elem()
			if _, err := d.fromFormInto(form, last[k], val, action); err != nil {
				return false, err
			}
			m.SetMapIndex(reflect.ValueOf(k).Convert(t.Key()), val)
		}
		v.Set(m)
		return true, nil
	case t.Kind() == reflect.Struct:
		found := false
		for _, f := range d.fields(t, action, false) {
			key := f.key
			if prefix != "" {
				key = prefix + "." + key
			}
			ok, err := d.fromFormInto(form, key, v.Field(f.index), action)
			if err != nil {
				return false, err
			}
			found = found || ok
		}
		return found, nil
	}
	return false, nil
}

// queryName is the query protocol's name of a field of JSON name name.
func (d dialect) queryName(name string, t reflect.Type, action string, response bool) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case d.sns:
		return name
	case t == byteSlice:
		return name
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
		return entryName(name, action, response)
	case t.Kind() == reflect.Slice, t.Kind() == reflect.Map:
		return singular(name)
	}
	return name
}

// writeXML writes v's fields as XML elements, as the query protocol's
// responses carry them.
func (d dialect) writeXML(b *bytes.Buffer, v reflect.Value, action string) {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return
	}
	for _, f := range d.fields(v.Type(), action, true) {
		fv := v.Field(f.index)
		switch {
		case f.anonymous:
			d.writeXML(b, fv, action) // an embedded shape's fields are the entry's own
		case f.omit && fv.IsZero():
		default:
			d.writeElement(b, f.key, fv, action)
		}
	}
}

func (d dialect) writeElement(b *bytes.Buffer, name string, v reflect.Value, action string) {
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return
		}
		v = v.Elem()
	}
	switch {
	case v.Type() == byteSlice:
		element(b, name, base64.StdEncoding.EncodeToString(v.Bytes()))
	case v.Kind() == reflect.String:
		element(b, name, v.String())
	case v.Kind() == reflect.Int || v.Kind() == reflect.Int64:
		element(b, name, strconv.FormatInt(v.Int(), 10))
	case v.Kind() == reflect.Bool:
		element(b, name, strconv.FormatBool(v.Bool()))
	case v.Kind() == reflect.Slice && d.sns:
		open(b, name)
		for i := range v.Len() {
			d.writeElement(b, "member", v.Index(i), action)
		}
		closeTag(b, name)
	case v.Kind() == reflect.Slice:
		for i := range v.Len() {
			d.writeElement(b, name, v.Index(i), action)
		}
	case v.Kind() == reflect.Map:
		keyName, valueName := d.mapNames(name)
		keys := v.MapKeys()
		slices.SortFunc(keys, func(x, y reflect.Value) int { return strings.Compare(x.String(), y.String()) })
		entry := name
		if d.sns {
			open(b, name)
			entry = "entry"
		}
		for _, k := range keys {
			open(b, entry)
			element(b, keyName, k.String())
			d.writeElement(b, valueName, v.MapIndex(k), action)
			closeTag(b, entry)
		}
		if d.sns {
			closeTag(b, name)
		}
	case v.Kind() == reflect.Struct:
		open(b, name)
		d.writeXML(b, v, action)
		closeTag(b, name)
	}
}

func element(b *bytes.Buffer, name, text string) {
	open(b, name)
	if plain(text) {
		b.WriteString(text)
	} else {
		_ = xml.EscapeText(b, []byte(text)) // a bytes.Buffer does not fail
	}
	closeTag(b, name)
}

// open writes <name>, closeTag </name>.
func open(b *bytes.Buffer, name string) {
	b.WriteByte('<')
	b.WriteString(name)
	b.WriteByte('>')
}

func closeTag(b *bytes.Buffer, name string) {
	b.WriteString("</")
	b.WriteString(name)
	b.WriteByte('>')
}

// plain reports whether xml.EscapeText would write s as it is: printable
// ASCII but for the five characters it escapes.
func plain(s string) bool {
	for i := range len(s) {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '<', c == '>', c == '&', c == '\'', c == '"':
			return false
		}
	}
	return true
}
