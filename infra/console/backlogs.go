package console

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// The overview's largest backlogs and rate limits: the workspaces with the most tasks waiting,
// per flow, with what fair share holds of them in the outbox (sql/057), and the waits of jobs
// whose store was over its rate limit, which the workers count in Redis
// (ratelimit.WaitLog).

// backlogsLimit bounds the workspaces the overview lists.
const backlogsLimit = 10

// Backlog is one workspace among the largest backlogs: its tasks per flow, the flows with the
// most waiting first.
type Backlog struct {
	WorkspaceID uuid.UUID
	Name        string
	Flows       []FlowBacklog
}

// FlowBacklog is one flow of a Backlog: its tasks pending (Waiting) and running, the requests
// among the pending ones that fair share holds in the outbox (Held), and the oldest pending
// task's age (0: none pending).
type FlowBacklog struct {
	Flow                   string
	Waiting, Held, Running int64
	OldestWaiting          time.Duration
}

// RateWaits is one platform's rate-limit waits: jobs that waited, before their task started,
// because their store was over its budget, in the current minute and in the last hour (the
// current minute and the 59 before it).
type RateWaits struct {
	Platform     string
	Minute, Hour int64
}

// taskBacklog is one row of operator_backlogs.
type taskBacklog struct {
	ws               uuid.UUID
	name, table      string
	pending, running int64
	oldest           *time.Time
}

func (r reader) backlogs(ctx context.Context, limit int) ([]taskBacklog, error) {
	rows, err := r.pool.Query(ctx, `SELECT workspace_id, name, task_table, pending, running, oldest_pending_at
		FROM operator_backlogs($1)`, limit)
	if err != nil {
		return nil, fmt.Errorf("console.backlogs: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (taskBacklog, error) {
		var b taskBacklog
		return b, row.Scan(&b.ws, &b.name, &b.table, &b.pending, &b.running, &b.oldest)
	})
	if err != nil {
		return nil, fmt.Errorf("console.backlogs: %w", err)
	}
	return out, nil
}

// heldKey is a workspace's queue (uuid.Nil: every workspace's).
type heldKey struct {
	ws    uuid.UUID
	queue string
}

// held returns the requests fair share holds per workspace and queue of workspaces wss, or
// per queue over every workspace when wss is nil.
func (r reader) held(ctx context.Context, wss []uuid.UUID) (map[heldKey]int64, error) {
	rows, err := r.pool.Query(ctx, `SELECT workspace_id, destination, held FROM operator_held_backlogs($1)`, wss)
	if err != nil {
		return nil, fmt.Errorf("console.held: %w", err)
	}
	out := map[heldKey]int64{}
	var ws *uuid.UUID
	var k heldKey
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&ws, &k.queue, &n}, func() error {
		k.ws = uuid.Nil
		if ws != nil {
			k.ws = *ws
		}
		out[k] += n
		return nil
	}); err != nil {
		return nil, fmt.Errorf("console.held: %w", err)
	}
	return out, nil
}

// largestBacklogs reads the workspaces with the most tasks waiting, each with its flows.
func (s *Server) largestBacklogs(ctx context.Context, now time.Time) ([]Backlog, error) {
	rows, err := s.data.backlogs(ctx, backlogsLimit)
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	var out []Backlog
	var wss []uuid.UUID
	index := map[uuid.UUID]int{}
	for _, row := range rows {
		i, ok := index[row.ws]
		if !ok {
			i = len(out)
			index[row.ws] = i
			out = append(out, Backlog{WorkspaceID: row.ws, Name: row.name})
			wss = append(wss, row.ws)
		}
		f := FlowBacklog{Flow: row.table, Waiting: row.pending, Running: row.running}
		if fl, ok := s.flowByTable(row.table); ok {
			f.Flow = fl.Name
		}
		if row.oldest != nil {
			f.OldestWaiting = now.Sub(*row.oldest)
		}
		out[i].Flows = append(out[i].Flows, f)
	}
	held, err := s.data.held(ctx, wss)
	if err != nil {
		return nil, err
	}
	for i := range out {
		for j := range out[i].Flows {
			f := &out[i].Flows[j]
			if fl, ok := s.flowByName(f.Flow); ok {
				f.Held = held[heldKey{out[i].WorkspaceID, fl.Queue}]
			}
		}
		slices.SortStableFunc(out[i].Flows, func(a, b FlowBacklog) int { return cmp.Compare(b.Waiting, a.Waiting) })
	}
	return out, nil
}

func (s *Server) flowByTable(table string) (Flow, bool) {
	i := slices.IndexFunc(s.cfg.Flows, func(f Flow) bool { return f.Table == table })
	if i < 0 {
		return Flow{}, false
	}
	return s.cfg.Flows[i], true
}

func (s *Server) flowByName(name string) (Flow, bool) {
	i := slices.IndexFunc(s.cfg.Flows, func(f Flow) bool { return f.Name == name })
	if i < 0 {
		return Flow{}, false
	}
	return s.cfg.Flows[i], true
}

// rateWaits reads the platforms' rate-limit waits (nil when the console has no wait log): one
// row per configured platform, and per platform the log names beyond them.
func (s *Server) rateWaits(ctx context.Context, now time.Time) ([]RateWaits, error) {
	if s.cfg.RateWaits.Client == nil {
		return nil, nil
	}
	minute, err := s.cfg.RateWaits.Recent(ctx, now, 1)
	if err != nil {
		return nil, err
	}
	hour, err := s.cfg.RateWaits.Recent(ctx, now, 60)
	if err != nil {
		return nil, err
	}
	platforms := slices.Clone(s.cfg.Platforms)
	for p := range hour {
		if !slices.Contains(platforms, p) {
			platforms = append(platforms, p)
		}
	}
	slices.Sort(platforms)
	out := make([]RateWaits, 0, len(platforms))
	for _, p := range platforms {
		out = append(out, RateWaits{Platform: p, Minute: minute[p], Hour: hour[p]})
	}
	return out, nil
}
