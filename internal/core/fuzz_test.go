package core

import "testing"

// FuzzQueue decodes a byte string into a queue configuration and a sequence
// of operations (see decodeInput) and runs them against the reference model
// of model_reference_test.go, with every check after every operation. The
// committed seeds live in testdata/fuzz/FuzzQueue; run it for a while with
//
//	go test -run '^$' -fuzz '^FuzzQueue$' -fuzztime 10s ./internal/core
//
// It uses a manual clock (stepClock): the mock's 1 ms sleep per move would
// cap it at a few hundred executions a second.
func FuzzQueue(f *testing.F) {
	f.Add(encodeInput([configBytes]byte{}, []op{{Kind: opOffer}, {Kind: opPoll}, {Kind: opAck}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, ops := decodeInput(data)
		h := newHarness(t, cfg, &stepClock{now: modelEpoch})
		defer h.close()
		h.run(ops)
	})
}
