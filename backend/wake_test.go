package backend

import (
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// awaitWake waits for w's signal, and fails the test, saying so, if none
// comes within a minute of real time: a missing wake-up fails, never hangs.
func awaitWake(t *testing.T, w Timer) {
	t.Helper()
	select {
	case <-w.C:
	case <-time.After(time.Minute):
		t.Fatal("the wake-up never signalled")
	}
}

// Both ways to arm a wake-up fire when the mock reaches their time, not
// a nanosecond before.
func TestFiresWhenTheMockReachesIt(t *testing.T) {
	for name, arm := range map[string]func(*clock.Mock) Timer{
		"After": func(m *clock.Mock) Timer { return After(m, time.Second) },
		"At":    func(m *clock.Mock) Timer { return At(m, m.Now().Add(time.Second)) },
	} {
		mock := clock.NewMock()
		w := arm(mock)
		mock.Add(time.Second - time.Nanosecond)
		select {
		case <-w.C:
			t.Fatalf("%s: fired before its time", name)
		default:
		}
		mock.Add(time.Nanosecond)
		awaitWake(t, w) // the mock's Add starts the func in a goroutine before it returns
		w.Stop()
	}
}

func TestStoppedNeverFires(t *testing.T) {
	mock := clock.NewMock()
	w := After(mock, time.Second)
	w.Stop()
	w.Stop() // twice is safe
	mock.Add(time.Hour)
	select {
	case <-w.C:
		t.Fatal("a stopped wake-up fired")
	default:
	}
	Timer{}.Stop() // the zero Timer too
}

// capture is a clock that keeps the func After arms, to run it by hand.
type capture struct {
	clock.Clock
	f func()
}

func (c *capture) AfterFunc(d time.Duration, f func()) *clock.Timer {
	c.f = f
	return c.Clock.AfterFunc(d, func() {})
}

// A second tick of the same timer (the mock's race) must neither block nor
// signal twice.
func TestSecondTickIsHarmless(t *testing.T) {
	c := &capture{Clock: clock.NewMock()}
	w := After(c, time.Second)
	defer w.Stop()
	c.f()
	c.f() // would block here if the func sent without a default
	awaitWake(t, w)
	select {
	case <-w.C:
		t.Fatal("signalled twice")
	default:
	}
}

func TestAfterOnTheRealClock(t *testing.T) {
	w := After(clock.New(), time.Millisecond)
	defer w.Stop()
	awaitWake(t, w)
}

func TestAtDueAlreadySignalsAtOnce(t *testing.T) {
	mock := clock.NewMock()
	w := At(mock, mock.Now())
	defer w.Stop()
	awaitWake(t, w)
	w = At(clock.New(), time.Now().Add(-time.Second))
	awaitWake(t, w)
}

// moving is a mock that another goroutine moves while a timer is armed:
// its first AfterFunc call moves it half a second first.
type moving struct {
	*clock.Mock
	moved bool
}

func (m *moving) AfterFunc(d time.Duration, f func()) *clock.Timer {
	if !m.moved {
		m.moved = true
		m.Mock.Add(500 * time.Millisecond)
	}
	return m.Mock.AfterFunc(d, f)
}

// At re-arms when the mock moved while it armed; a timer for the duration
// it had read would fire half a second late.
func TestAtIsNotLateWhenTheMockMovesWhileArming(t *testing.T) {
	m := &moving{Mock: clock.NewMock()}
	at := m.Now().Add(time.Second)
	w := At(m, at)
	defer w.Stop()
	m.Mock.Add(500 * time.Millisecond) // now at: it must fire
	select {
	case <-w.C:
	case <-time.After(10 * time.Second): // a watchdog, not a wait for state
		t.Fatal("the wake-up did not fire at its time: it was armed late")
	}
}
