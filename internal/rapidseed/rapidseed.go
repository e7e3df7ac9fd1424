// Package rapidseed pins the seed of pgregory.net/rapid's property tests in
// a test binary, so that a test that asserts what its random runs cover
// runs the same sequences every time.
package rapidseed

import (
	"flag"
	"os"
	"strconv"
)

// Pin sets rapid's -rapid.seed flag to seed, unless the caller named a seed
// (-rapid.seed=N on the command line, or RAPID_SEED=N). Call it from
// TestMain after flag.Parse. It panics if the test binary has no such flag
// (rapid is not linked in, or renamed its flag): the tests that rely on it
// must know.
func Pin(seed uint64) {
	given := os.Getenv("RAPID_SEED") != ""
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "rapid.seed" })
	if given {
		return
	}
	if err := flag.Set("rapid.seed", strconv.FormatUint(seed, 10)); err != nil {
		panic("rapidseed: " + err.Error())
	}
}
