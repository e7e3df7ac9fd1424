// Package schedule publishes work on a schedule: fixed intervals and cron
// expressions in a time zone, fired on an injected clock, once per slot
// across restarts and replicas.
//
//	s, _ := schedule.New()
//	s.Add("nightly-report", schedule.CronIn(berlin, "0 3 * * *"),
//		schedule.Publish(b, "reports", func(f schedule.Fire) Report {
//			return Report{Day: f.Slot.AddDate(0, 0, -1)}
//		}))
//	go s.Run(ctx)
//
// # Slots and exactly once
//
// A Spec (Every, Cron) is a set of instants, the slots, that every
// process computes alike. Each fire carries its slot and a dedup ID that
// names it (Fire.DedupID); a Job that publishes with it (Publish does, on
// a broker) puts each slot in the queue once, on every backend with
// publish dedup (the in-memory and durable broker, JetStream, SQS FIFO
// queues), however many schedulers fire it and however often a crash
// makes one fire it again, as long as the backend's dedup window covers
// the time between the two publishes. Two replicas with the same
// schedules fire each slot within their jitter of each other; a
// scheduler with a Store that restarts after a crash fires the slot it
// was in again (it saves a slot after its job returned).
//
// # Missed slots
//
// A slot that passes while Run runs fires, late if the clock moved past
// several at once (each of them, whatever the policy, up to the catch-up
// limit, WithCatchUpLimit). Slots that passed while no Run was running for
// the schedule (the process was down, with a Store to say where it was;
// Run was stopped; the schedule was added later than its Store's last
// slot), and slots that passed while its job kept failing (a later slot
// passed before a retry of the one that failed succeeded), follow the
// schedule's policy (WithMissed): fire the latest once (the default), skip
// them, or fire each up to a limit. Slots that pass while a schedule is
// paused are skipped. Status counts what was skipped, and why.
//
// # Time
//
// Every time read and every wait goes through the injected clock
// (WithClock), with one timer for the earliest fire. On a clock.Mock a
// test moves time and calls AwaitQuiet; then every slot the move passed
// has fired, in order, whatever steps the test took (benbjohnson/clock's
// Mock moves through each timer it passes, so a fire may see a reading
// inside the step). A test that also runs a worker pool on the fired
// messages moves to each fire (Status().NextFire) and lets the pool finish
// before moving on: the mock does not wait for the pool, and a lease can
// expire under a handler while it moves. The scheduler runs unchanged inside testing/synctest
// with clock.New(). Cron expressions read wall-clock time in their zone:
// see Cron for what a daylight-saving change does.
//
// # Concurrency
//
// Jobs run on Run's goroutine, one at a time, with no lock of the
// scheduler held, so a job may call any method of the Scheduler. Add,
// Remove, Pause, Resume, Trigger, Status and AwaitQuiet are safe for
// concurrent use, before and while Run runs.
package schedule
