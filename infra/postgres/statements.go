package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/listingkit/listing/infra/metrics"
)

// Statements counts what a pool sends to PostgreSQL: statements (each query string, each query
// of a batch, each COPY; BEGIN and COMMIT included) and round trips (a query, a batch or a COPY is
// one). They are the database's side of what a unit of work costs, beside its transactions
// (pg_stat_database): a pgx tracer installed by Connect (PoolConfig.Statements).
type Statements struct {
	statements prometheus.Counter
	roundTrips prometheus.Counter
}

// NewStatements returns the counters listing_db_statements_total and
// listing_db_round_trips_total, registered on reg when it is not nil. Pools of one process
// opened with the same reg count into the same series.
func NewStatements(reg prometheus.Registerer) (*Statements, error) {
	s := &Statements{
		statements: prometheus.NewCounter(prometheus.CounterOpts{Name: "listing_db_statements_total",
			Help: "Statements sent to PostgreSQL by this process's service pools (each query of a batch counts; BEGIN and COMMIT too)."}),
		roundTrips: prometheus.NewCounter(prometheus.CounterOpts{Name: "listing_db_round_trips_total",
			Help: "Round trips to PostgreSQL by this process's service pools (a query, a batch or a COPY)."}),
	}
	if reg == nil {
		return s, nil
	}
	var err error
	s.statements = metrics.Register(reg, s.statements, &err)
	s.roundTrips = metrics.Register(reg, s.roundTrips, &err)
	if err != nil {
		return nil, fmt.Errorf("postgres.NewStatements: %w", err)
	}
	return s, nil
}

var (
	_ pgx.QueryTracer    = (*Statements)(nil)
	_ pgx.BatchTracer    = (*Statements)(nil)
	_ pgx.CopyFromTracer = (*Statements)(nil)
)

// TraceQueryStart implements pgx.QueryTracer.
func (s *Statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	s.statements.Inc()
	s.roundTrips.Inc()
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (*Statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart implements pgx.BatchTracer.
func (s *Statements) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	s.roundTrips.Inc()
	return ctx
}

// TraceBatchQuery implements pgx.BatchTracer.
func (s *Statements) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	s.statements.Inc()
}

// TraceBatchEnd implements pgx.BatchTracer.
func (*Statements) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TraceCopyFromStart implements pgx.CopyFromTracer.
func (s *Statements) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	s.statements.Inc()
	s.roundTrips.Inc()
	return ctx
}

// TraceCopyFromEnd implements pgx.CopyFromTracer.
func (*Statements) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}
