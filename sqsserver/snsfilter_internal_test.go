package sqsserver

import (
	"testing"
)

func TestFilterPolicyOperators(t *testing.T) {
	s := func(v string) snsAttributeValue { return snsAttributeValue{DataType: "String", StringValue: &v} }
	n := func(v string) snsAttributeValue { return snsAttributeValue{DataType: "Number", StringValue: &v} }
	arr := func(v string) snsAttributeValue { return snsAttributeValue{DataType: "String.Array", StringValue: &v} }
	type msg = map[string]snsAttributeValue
	for _, c := range []struct {
		policy string
		msg    msg
		want   bool
	}{
		{`{"a": ["x"]}`, msg{"a": s("x")}, true},
		{`{"a": ["x"]}`, msg{"a": s("y")}, false},
		{`{"a": ["x"]}`, msg{}, false},
		{`{"a": [5]}`, msg{"a": n("5.0")}, true},
		{`{"a": [5]}`, msg{"a": s("5")}, false},
		{`{"a": [{"prefix": "eu-"}]}`, msg{"a": s("eu-west-1")}, true},
		{`{"a": [{"suffix": ".png"}]}`, msg{"a": s("cat.jpg")}, false},
		{`{"a": [{"equals-ignore-case": "PNG"}]}`, msg{"a": s("png")}, true},
		{`{"a": [{"anything-but": ["x", "y"]}]}`, msg{"a": s("z")}, true},
		{`{"a": [{"anything-but": ["x", "y"]}]}`, msg{"a": s("x")}, false},
		{`{"a": [{"anything-but": ["x"]}]}`, msg{}, false},
		{`{"a": [{"anything-but": {"prefix": "test-"}}]}`, msg{"a": s("test-1")}, false},
		{`{"a": [{"anything-but": 3}]}`, msg{"a": n("4")}, true},
		{`{"a": [{"numeric": [">", 0, "<=", 10]}]}`, msg{"a": n("10")}, true},
		{`{"a": [{"numeric": [">", 0, "<=", 10]}]}`, msg{"a": n("0")}, false},
		{`{"a": [{"numeric": ["=", 1.5]}]}`, msg{"a": n("1.50")}, true},
		// exists, as AWS documents it: true needs a non-empty value; false
		// needs the key absent and at least one attribute present.
		{`{"a": [{"exists": true}]}`, msg{"a": s("x")}, true},
		{`{"a": [{"exists": true}]}`, msg{"a": s("")}, false},
		{`{"a": [{"exists": true}]}`, msg{"a": {DataType: "Binary", BinaryValue: []byte{0}}}, true},
		{`{"a": [{"exists": true}]}`, msg{"b": s("x")}, false},
		{`{"a": [{"exists": false}]}`, msg{"b": s("x")}, true},
		{`{"a": [{"exists": false}]}`, msg{"a": s("x")}, false},
		{`{"a": [{"exists": false}]}`, msg{}, false},
		{`{"a": [{"exists": false}]}`, nil, false},
		{`{"a": ["x"], "b": ["y"]}`, msg{"a": s("x"), "b": s("z")}, false},
		{`{"a": ["x", "y"]}`, msg{"a": s("y")}, true},
		{`{"a": ["x"]}`, msg{"a": arr(`["w", "x"]`)}, true},
		{`{"a": ["x"]}`, msg{"a": arr(`["w"]`)}, false},
		{`{"$or": [{"a": ["x"]}, {"b": ["y"]}]}`, msg{"b": s("y")}, true},
		{`{"$or": [{"a": ["x"]}, {"b": ["y"]}]}`, msg{"c": s("y")}, false},
		{`{"a": ["x"]}`, msg{"a": {DataType: "Binary", BinaryValue: []byte("x")}}, false},
	} {
		p, err := parseFilterPolicy(c.policy)
		if err != nil {
			t.Fatalf("%s: %v", c.policy, err)
		}
		if got := p.matches(attributeLookup(c.msg)); got != c.want {
			t.Errorf("%s on %v: %v, want %v", c.policy, c.msg, got, c.want)
		}
	}
}

func TestFilterPolicyOnTheBody(t *testing.T) {
	for _, c := range []struct {
		policy, body string
		want         bool
	}{
		{`{"order": {"total": [{"numeric": [">=", 100]}]}}`, `{"order": {"total": 150}}`, true},
		{`{"order": {"total": [{"numeric": [">=", 100]}]}}`, `{"order": {"total": 50}}`, false},
		{`{"lines": {"sku": ["a"]}}`, `{"lines": [{"sku": "b"}, {"sku": "a"}]}`, true},
		{`{"tags": ["red"]}`, `{"tags": ["blue", "red"]}`, true},
		{`{"paid": [true]}`, `{"paid": true}`, true},
		{`{"note": [null]}`, `{"note": null}`, true},
		{`{"note": [{"exists": false}]}`, `{"other": 1}`, true},
		{`{"note": [{"exists": false}]}`, `{}`, false},
		// exists works on leaf values only, and true needs one that is
		// neither null nor empty.
		{`{"note": [{"exists": true}]}`, `{"note": "x"}`, true},
		{`{"note": [{"exists": true}]}`, `{"note": 0}`, true},
		{`{"note": [{"exists": true}]}`, `{"note": false}`, true},
		{`{"note": [{"exists": true}]}`, `{"note": null}`, false},
		{`{"note": [{"exists": true}]}`, `{"note": ""}`, false},
		{`{"note": [{"exists": true}]}`, `{"note": {"inner": 1}}`, false},
		{`{"note": [{"exists": true}]}`, `{"note": ["", "x"]}`, true},
		{`{"note": [{"exists": false}]}`, `{"note": {"inner": 1}}`, true},
		{`{"note": [{"exists": false}]}`, `{"note": null}`, true},
		{`{"order": {"id": [{"exists": true}]}}`, `{"order": {"id": "7"}}`, true},
		{`{"order": {"id": [{"exists": false}]}}`, `{"order": {"total": 3}}`, true},
		{`{"order": {"id": ["1"]}}`, `{"order": "1"}`, false},
	} {
		p, err := parseFilterPolicy(c.policy)
		if err != nil {
			t.Fatalf("%s: %v", c.policy, err)
		}
		var body map[string]any
		if err := jsonValues([]byte(c.body), &body); err != nil {
			t.Fatal(err)
		}
		if got := p.matches(bodyLookup(body)); got != c.want {
			t.Errorf("%s on %s: %v, want %v", c.policy, c.body, got, c.want)
		}
	}
}

func TestFilterPolicyRefusals(t *testing.T) {
	for _, bad := range []string{
		``, `[]`, `{}`, `{"a": "x"}`, `{"a": []}`, `{"a": [{"prefix": 1}]}`, `{"a": [{"numeric": ["~", 1]}]}`,
		`{"a": [{"numeric": [">", "1"]}]}`, `{"a": [{"exists": "yes"}]}`, `{"a": [{"nope": 1}]}`, `{"$or": [{"a": ["x"]}]}`,
		`{"a": [{"anything-but": [true]}]}`, `{"a": [{"prefix": "x", "suffix": "y"}]}`,
	} {
		if _, err := parseFilterPolicy(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
}
