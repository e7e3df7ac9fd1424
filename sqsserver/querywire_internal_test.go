package sqsserver

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"reflect"
	"strconv"
	"testing"
)

// fromFormInto sets what fromForm, then JSON, set: for every action's
// input of both dialects, on random forms of its shape (every field
// present or not, lists and maps of 0 to 3 members, a bad number or
// base64 now and then), the two ways decode the same value or fail
// alike.
func TestFromFormIntoAgreesWithJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(46, 2))
	for _, set := range []struct {
		d        dialect
		handlers map[string]handler
	}{{sqsDialect, handlers}, {snsDialect, snsHandlers}} {
		for action, h := range set.handlers {
			if h.in == nil {
				continue
			}
			for round := range 200 {
				form := url.Values{}
				fillForm(rng, set.d, form, "", h.in, action, 0)

				var viaJSON any = reflect.New(h.in).Interface()
				m, _, err1 := set.d.fromForm(form, "", h.in, action)
				if err1 == nil {
					body, err := json.Marshal(m)
					if err != nil {
						t.Fatal(err)
					}
					err1 = json.Unmarshal(body, viaJSON)
				}
				direct := reflect.New(h.in)
				_, err2 := set.d.fromFormInto(form, "", direct.Elem(), action)
				switch {
				case (err1 == nil) != (err2 == nil):
					t.Fatalf("%s round %d, form %v: errors differ: JSON %v, direct %v", action, round, form, err1, err2)
				case err1 == nil && !reflect.DeepEqual(viaJSON, direct.Interface()):
					t.Fatalf("%s round %d, form %v:\n JSON   %+v\n direct %+v", action, round, form, viaJSON, direct.Interface())
				}
			}
		}
	}
}

// fillForm writes into form a random value of type t under prefix, named
// as the dialect names it.
func fillForm(rng *rand.Rand, d dialect, form url.Values, prefix string, t reflect.Type, action string, depth int) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	present := prefix == "" || rng.IntN(4) > 0
	if !present || depth > 4 {
		return
	}
	switch {
	case t == byteSlice:
		v := base64.StdEncoding.EncodeToString([]byte(fmt.Sprint("bytes ", rng.IntN(100))))
		if rng.IntN(20) == 0 {
			v = "not base64!"
		}
		form.Set(prefix, v)
	case t.Kind() == reflect.String:
		form.Set(prefix, []string{"", "x", "queue-1", "a b&c"}[rng.IntN(4)])
	case t.Kind() == reflect.Int || t.Kind() == reflect.Int64:
		v := strconv.Itoa(rng.IntN(100) - 10)
		if rng.IntN(20) == 0 {
			v = "ten"
		}
		form.Set(prefix, v)
	case t.Kind() == reflect.Bool:
		form.Set(prefix, []string{"true", "false", "1", "maybe"}[rng.IntN(4)])
	case t.Kind() == reflect.Slice:
		for i := 1; i <= rng.IntN(4); i++ {
			fillForm(rng, d, form, d.item(prefix, i, false), t.Elem(), action, depth+1)
		}
	case t.Kind() == reflect.Map:
		key, value := d.mapNames(prefix[lastDot(prefix)+1:])
		for i := 1; i <= rng.IntN(4); i++ {
			at := d.item(prefix, i, true) + "."
			form.Set(at+key, fmt.Sprint("k", rng.IntN(3)))
			fillForm(rng, d, form, at+value, t.Elem(), action, depth+1)
		}
	case t.Kind() == reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			name, _ := jsonName(f)
			if name == "" {
				continue
			}
			key := d.queryName(name, f.Type, action, false)
			if prefix != "" {
				key = prefix + "." + key
			}
			fillForm(rng, d, form, key, f.Type, action, depth+1)
		}
	}
}

func lastDot(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '.' {
			return i
		}
	}
	return -1
}
