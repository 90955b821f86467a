package console

import (
	"context"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// The failures and workspaces pages: what failed, and where work piles up, across every
// workspace. Each reads through a SECURITY DEFINER function of sql/039 (lifecycle columns of
// the task tables, operations without their results).

// Bounds of the failures and workspaces pages.
const (
	failuresPageSize = 50
	workspacesLimit  = 100
	recentOpsLimit   = 50
)

// errorCodeSyntax is what an error code looks like (domain error codes: PLATFORM_REJECTED).
var errorCodeSyntax = regexp.MustCompile(`^[A-Z][A-Z0-9_]{0,63}$`)

// Failure is one failed task with its operation.
type Failure struct {
	Operation
	// Flow names the task's flow; TaskTable is its table.
	Flow, TaskTable string
	TaskID          uuid.UUID
	// Attempts counts the handler's runs; Reconciliations the reconciler's redeliveries.
	Attempts, Reconciliations int
	FailedAt                  time.Time
}

// failureFilter selects failures: one flow's task table (empty: every flow), one error code
// (empty: any), failed at or after Since, and before the page key (BeforeAt zero: the first
// page).
type failureFilter struct {
	Table, Code string
	Since       time.Time
	BeforeAt    time.Time
	BeforeID    uuid.UUID
}

func (r reader) failures(ctx context.Context, f failureFilter, limit int) ([]Failure, error) {
	var table, code *string
	if f.Table != "" {
		table = &f.Table
	}
	if f.Code != "" {
		code = &f.Code
	}
	var beforeAt *time.Time
	var beforeID *uuid.UUID
	if !f.BeforeAt.IsZero() {
		beforeAt, beforeID = &f.BeforeAt, &f.BeforeID
	}
	rows, err := r.pool.Query(ctx, `SELECT task_table, task_id, attempts, reconciliations, failed_at, `+operationColumns+`
		FROM operator_failures($1, $2, $3, $4, $5, $6)`, table, code, f.Since, beforeAt, beforeID, limit)
	if err != nil {
		return nil, fmt.Errorf("console.failures: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Failure, error) {
		var x Failure
		o := &x.Operation
		return x, row.Scan(&x.TaskTable, &x.TaskID, &x.Attempts, &x.Reconciliations, &x.FailedAt,
			&o.ID, &o.WorkspaceID, &o.Type, &o.Status, &o.ResourceType, &o.ResourceID, &o.ErrorCode, &o.ErrorMessage,
			&o.CreatedAt, &o.UpdatedAt)
	})
	if err != nil {
		return nil, fmt.Errorf("console.failures: %w", err)
	}
	return out, nil
}

// WorkspaceLoad is one workspace on the workspaces page: its unfinished tasks (pending or
// running) and its failures since the page's window began. OldestUnfinishedAt is the last
// move of the unfinished task that moved least recently (nil: none unfinished).
type WorkspaceLoad struct {
	ID                 uuid.UUID
	Name               string
	Unfinished, Failed int64
	OldestUnfinishedAt *time.Time
}

func (r reader) workspaces(ctx context.Context, since time.Time, limit int) ([]WorkspaceLoad, error) {
	rows, err := r.pool.Query(ctx, `SELECT workspace_id, name, unfinished, failed, oldest_unfinished_at
		FROM operator_workspaces($1, $2)`, since, limit)
	if err != nil {
		return nil, fmt.Errorf("console.workspaces: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (WorkspaceLoad, error) {
		var w WorkspaceLoad
		return w, row.Scan(&w.ID, &w.Name, &w.Unfinished, &w.Failed, &w.OldestUnfinishedAt)
	})
	if err != nil {
		return nil, fmt.Errorf("console.workspaces: %w", err)
	}
	return out, nil
}

// FlowLoad is one flow of one workspace: its tasks pending, running and failed since the
// window began; OldestUnfinishedAt as WorkspaceLoad's.
type FlowLoad struct {
	Flow, TaskTable          string
	Pending, Running, Failed int64
	OldestUnfinishedAt       *time.Time
}

func (r reader) workspaceFlows(ctx context.Context, ws uuid.UUID, since time.Time) ([]FlowLoad, error) {
	rows, err := r.pool.Query(ctx, `SELECT task_table, pending, running, failed, oldest_unfinished_at
		FROM operator_workspace_flows($1, $2)`, ws, since)
	if err != nil {
		return nil, fmt.Errorf("console.workspaceFlows: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (FlowLoad, error) {
		var f FlowLoad
		return f, row.Scan(&f.TaskTable, &f.Pending, &f.Running, &f.Failed, &f.OldestUnfinishedAt)
	})
	if err != nil {
		return nil, fmt.Errorf("console.workspaceFlows: %w", err)
	}
	return out, nil
}

func (r reader) recentOperations(ctx context.Context, ws uuid.UUID, limit int) ([]Operation, error) {
	rows, err := r.pool.Query(ctx, `SELECT `+operationColumns+` FROM operator_recent_operations($1, $2)`, ws, limit)
	if err != nil {
		return nil, fmt.Errorf("console.recentOperations: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanOperation)
	if err != nil {
		return nil, fmt.Errorf("console.recentOperations: %w", err)
	}
	return out, nil
}

// flowOf names the flow of a task table (the table itself when Config.Flows does not know it).
func (s *Server) flowOf(table string) string {
	for _, f := range s.cfg.Flows {
		if f.Table == table {
			return f.Name
		}
	}
	return table
}

// failuresData is the failures page.
type failuresData struct {
	Flows []Flow
	// The filters as the form shows them.
	Flow, Code, Since string
	SinceChoices      []sinceChoice
	Failures          []Failure
	// Next is the address of the next page (built here from validated filters); empty on
	// the last.
	Next template.URL
}

// sinceChoice is one of the failures page's time windows.
type sinceChoice struct {
	Name   string
	Window time.Duration
}

// sinceChoices are the failures page's time windows, as the form lists them; the default
// is defaultSince.
var sinceChoices = []sinceChoice{{"1h", time.Hour}, {"24h", 24 * time.Hour}, {"7d", 7 * 24 * time.Hour}, {"30d", 30 * 24 * time.Hour}}

const defaultSince = "7d"

func (s *Server) failuresPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := failuresData{Flows: s.cfg.Flows, Flow: q.Get("flow"), Code: strings.TrimSpace(q.Get("code")), Since: q.Get("since"),
		SinceChoices: sinceChoices}
	p := page{Title: "Failures", Data: &d}
	f := failureFilter{Code: d.Code}
	var bad []string
	if d.Flow != "" {
		i := slices.IndexFunc(s.cfg.Flows, func(x Flow) bool { return x.Name == d.Flow })
		if i < 0 {
			bad = append(bad, "an unknown flow")
		} else {
			f.Table = s.cfg.Flows[i].Table
		}
	}
	if d.Code != "" && !errorCodeSyntax.MatchString(d.Code) {
		bad = append(bad, "an error code is CAPITALS_AND_UNDERSCORES")
	}
	if d.Since == "" {
		d.Since = defaultSince
	}
	if i := slices.IndexFunc(sinceChoices, func(c sinceChoice) bool { return c.Name == d.Since }); i >= 0 {
		f.Since = s.now().Add(-sinceChoices[i].Window)
	} else {
		bad = append(bad, "since is one of 1h, 24h, 7d, 30d")
	}
	if after := q.Get("before"); after != "" {
		at, id, ok := parsePageKey(after)
		if !ok {
			bad = append(bad, "a malformed page")
		}
		f.BeforeAt, f.BeforeID = at, id
	}
	if len(bad) > 0 {
		p.Error = "Bad filter: " + strings.Join(bad, "; ") + "."
		s.render(w, r, http.StatusBadRequest, "failures", p)
		return
	}
	var err error
	if d.Failures, err = s.data.failures(r.Context(), f, failuresPageSize+1); err != nil {
		s.fail(w, r, "failures", err)
		return
	}
	if len(d.Failures) > failuresPageSize {
		d.Failures = d.Failures[:failuresPageSize]
		last := d.Failures[len(d.Failures)-1]
		next := url.Values{"since": {d.Since}, "before": {pageKey(last.FailedAt, last.TaskID)}}
		if d.Flow != "" {
			next.Set("flow", d.Flow)
		}
		if d.Code != "" {
			next.Set("code", d.Code)
		}
		d.Next = template.URL("/failures?" + next.Encode())
	}
	for i := range d.Failures {
		d.Failures[i].Flow = s.flowOf(d.Failures[i].TaskTable)
	}
	s.render(w, r, http.StatusOK, "failures", p)
}

// pageKey is the failures page's key of a row: its failure time and task id. A task id alone
// does not order the rows, and a time alone is not unique.
func pageKey(at time.Time, id uuid.UUID) string {
	return at.UTC().Format(time.RFC3339Nano) + "_" + id.String()
}

func parsePageKey(s string) (time.Time, uuid.UUID, bool) {
	ts, idText, ok := strings.Cut(s, "_")
	if !ok {
		return time.Time{}, uuid.Nil, false
	}
	at, err1 := time.Parse(time.RFC3339Nano, ts)
	id, err2 := uuid.Parse(idText)
	return at, id, err1 == nil && err2 == nil
}

// workspacesData is the workspaces page: where work piles up and fails.
type workspacesData struct {
	Window     string
	Workspaces []WorkspaceLoad
}

func (s *Server) workspacesPage(w http.ResponseWriter, r *http.Request) {
	d := workspacesData{Window: "24h"}
	var err error
	if d.Workspaces, err = s.data.workspaces(r.Context(), s.now().Add(-24*time.Hour), workspacesLimit); err != nil {
		s.fail(w, r, "workspaces", err)
		return
	}
	s.render(w, r, http.StatusOK, "workspaces", page{Title: "Workspaces", Data: d})
}

// workspaceData is one workspace's page.
type workspaceData struct {
	ID         uuid.UUID
	Window     string
	Flows      []FlowLoad
	Stores     []StoreBacklog
	Failed     []Operation
	Operations []Operation
}

func (s *Server) workspacePage(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		s.render(w, r, http.StatusBadRequest, "workspace", page{Title: "Workspace", Error: "The workspace must be an id."})
		return
	}
	ctx := r.Context()
	d := workspaceData{ID: id, Window: "24h"}
	d.Flows, err = s.data.workspaceFlows(ctx, id, s.now().Add(-24*time.Hour))
	if err == nil {
		d.Stores, err = s.data.storeBacklogs(ctx, id)
	}
	if err == nil {
		d.Failed, err = s.data.failedOperations(ctx, id, recentOpsLimit)
	}
	if err == nil {
		d.Operations, err = s.data.recentOperations(ctx, id, recentOpsLimit)
	}
	if err != nil {
		s.fail(w, r, "workspace", err)
		return
	}
	for i := range d.Flows {
		d.Flows[i].Flow = s.flowOf(d.Flows[i].TaskTable)
	}
	for i := range d.Stores {
		d.Stores[i] = paced(d.Stores[i], s.cfg.StoreRateLimits, s.now())
	}
	if len(d.Operations) == 0 && !slices.ContainsFunc(d.Flows, func(f FlowLoad) bool { return f.Pending+f.Running+f.Failed > 0 }) {
		s.render(w, r, http.StatusNotFound, "workspace", page{Title: "Workspace", Error: "No workspace with this id has any operation.",
			Data: d})
		return
	}
	s.render(w, r, http.StatusOK, "workspace", page{Title: "Workspace", Data: d})
}
