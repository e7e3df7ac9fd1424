package pgleasebus_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasebus/leasebus/pgleasebus"
)

// pgEnv names the PostgreSQL the tests run against: a URL such as
// postgres://leasebus@127.0.0.1:55432/postgres?sslmode=disable. .ci/run
// starts a cluster and sets it. Without it every test skips, saying so,
// unless requireEnv is set (as .ci/run sets it): then they fail.
const (
	pgEnv      = "LEASEBUS_TEST_POSTGRES"
	requireEnv = "LEASEBUS_REQUIRE_POSTGRES"
)

// hangGuard bounds every wait, so that a bug fails a test rather than
// hanging it. It is never a timing assertion.
const hangGuard = time.Minute

var schemaSeq atomic.Int64

// pgURL returns the database's URL, or skips t.
func pgURL(t testing.TB) string {
	t.Helper()
	url := os.Getenv(pgEnv)
	if url == "" {
		if os.Getenv(requireEnv) != "" {
			t.Fatalf("%s is set but %s is not", requireEnv, pgEnv)
		}
		t.Skipf("set %s to a PostgreSQL URL to run this test (bash .ci/run starts one)", pgEnv)
	}
	return url
}

// newPool returns a pool on the test database, closed when t ends.
func newPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), pgURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// freshSchema returns a schema name no other test uses, dropped with its
// tables when t ends.
func freshSchema(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	schema := fmt.Sprintf("t%d_%d", os.Getpid(), schemaSeq.Add(1))
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return schema
}

// env is a bus on a schema of the test's own, on a mock clock.
type env struct {
	pool *pgxpool.Pool
	bus  *pgleasebus.Bus
	clk  *clock.Mock
}

// newEnv opens a bus on a fresh schema with a mock clock, closed when t
// ends.
func newEnv(t testing.TB, opts ...pgleasebus.Option) *env {
	t.Helper()
	pool := newPool(t)
	clk := clock.NewMock()
	clk.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	bus, err := pgleasebus.Open(context.Background(), pool, append([]pgleasebus.Option{
		pgleasebus.WithClock(clk), pgleasebus.WithSchema(freshSchema(t, pool)),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bus.Close() })
	return &env{pool: pool, bus: bus, clk: clk}
}

// bounded returns a context that ends at the hang guard.
func bounded(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	t.Cleanup(cancel)
	return ctx
}
