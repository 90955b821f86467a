package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/bullmq"
	"github.com/listingkit/listing/infra/outbox"
)

// Limits of the lists a page shows.
const (
	totalsLimit       = 500
	deadLettersLimit  = 200
	actionsLimit      = 50
	failedJobsLimit   = 20
	failedOpsLimit    = 100
	maxJobIDLength    = 200
	maxReasonLength   = outbox.MaxReasonLength
	signinFailedPause = 300 * time.Millisecond
)

// notices are the fixed messages a redirect may ask a page to show (?done=…): nothing the
// client writes is echoed.
var notices = map[string]string{
	"redrive":      "Redriven: the event is pending again and will be dispatched shortly.",
	"redrive-none": "Nothing redriven: the event is no longer a dead letter.",
	"purge":        "Purged: the dead letter is deleted; the purge is recorded.",
	"purge-none":   "Nothing purged: the event is no longer a dead letter.",
	"retry":        "Retried: the job is waiting again with its attempts reset.",
	"remove":       "Removed: the failed job is deleted.",
}

func (s *Server) signinForm(w http.ResponseWriter, r *http.Request) {
	if s.dev() {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	s.render(w, r, http.StatusOK, "signin", page{Title: "Sign in"})
}

func (s *Server) signin(w http.ResponseWriter, r *http.Request) {
	if s.dev() {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	name, ok, retryAfter, err := s.checkSecret(r, strings.TrimSpace(r.PostFormValue("token")))
	if s.refusedCheck(w, retryAfter, err) {
		return
	}
	if !ok {
		time.Sleep(signinFailedPause)
		s.render(w, r, http.StatusUnauthorized, "signin", page{Title: "Sign in", Error: "Unknown token."})
		return
	}
	if _, err := s.newSession(w, r, name); err != nil {
		s.internalError(w, err)
		return
	}
	s.log.Info("console: signed in", "operator", name)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// signout revokes the session for every console process, then clears the cookie.
func (s *Server) signout(w http.ResponseWriter, r *http.Request) {
	if ss := identityOf(r).Session; ss != nil {
		if err := s.sessions.revoke(r.Context(), ss.ID); err != nil {
			s.internalError(w, err)
			return
		}
	}
	clearSession(w, r)
	s.log.Info("console: signed out", "operator", identityOf(r).Operator)
	http.Redirect(w, r, "/signin", http.StatusSeeOther)
}

// outboxData is the outbox page.
type outboxData struct {
	Stats    outbox.Stats
	Statuses []string
	// Delivered draws Stats.Delivered.PerMinute.
	Delivered   Chart
	Totals      []Total
	DeadLetters []DeadLetter
	Actions     []OutboxAction
}

func (s *Server) outboxPage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	// The live table's statuses: a delivered event leaves it for the log (Stats.Delivered).
	d := outboxData{Statuses: []string{outbox.StatusPending, outbox.StatusHeld, outbox.StatusDispatching, outbox.StatusDeadLetter}}
	var err error
	if d.Stats, err = s.ops.Stats(ctx); err == nil {
		per := make([]float64, len(d.Stats.Delivered.PerMinute))
		for i, n := range d.Stats.Delivered.PerMinute {
			per[i] = float64(n)
		}
		d.Delivered = Chart{ID: "delivered-chart", Title: "Events delivered per minute, the last hour", Unit: "events",
			End: d.Stats.At.Truncate(time.Minute), Step: time.Minute, Series: []Series{{Points: per}}, Bars: true}
		if d.Totals, err = s.data.totals(ctx, totalsLimit); err == nil {
			if d.DeadLetters, err = s.data.deadLetters(ctx, deadLettersLimit); err == nil {
				d.Actions, err = s.data.outboxActions(ctx, actionsLimit)
			}
		}
	}
	if err != nil {
		s.fail(w, r, "outbox", err)
		return
	}
	s.render(w, r, http.StatusOK, "outbox", page{Title: "Outbox", Notice: notices[r.URL.Query().Get("done")], Data: d})
}

func (s *Server) eventPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ws, err1 := uuid.Parse(q.Get("workspace"))
	id, err2 := uuid.Parse(q.Get("id"))
	if err1 != nil || err2 != nil {
		s.render(w, r, http.StatusBadRequest, "event", page{Title: "Outbox event", Error: "workspace and id must be ids."})
		return
	}
	ev, err := s.ops.Show(r.Context(), ws, id)
	if errors.Is(err, domain.ErrNotFound) {
		s.render(w, r, http.StatusNotFound, "event", page{Title: "Outbox event",
			Error: "No such event in this workspace (purged, or removed after its retention)."})
		return
	}
	if err != nil {
		s.fail(w, r, "event", err)
		return
	}
	ev.LastError = outbox.SanitizeText(ev.LastError, 1000)
	s.render(w, r, http.StatusOK, "event", page{Title: "Outbox event", Notice: notices[q.Get("done")], Data: ev})
}

// outboxAction redrives or purges one dead letter of one workspace, as the operator.
func (s *Server) outboxAction(w http.ResponseWriter, r *http.Request) {
	op := identityOf(r).Operator
	purge := strings.HasSuffix(r.URL.Path, "/purge")
	ws, err1 := uuid.Parse(r.PostFormValue("workspace"))
	id, err2 := uuid.Parse(r.PostFormValue("id"))
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	if err1 != nil || err2 != nil || reason == "" || len(reason) > maxReasonLength {
		http.Error(w, fmt.Sprintf("bad request: workspace and id must be ids, reason 1-%d bytes", maxReasonLength), http.StatusBadRequest)
		return
	}
	p := outbox.DeadLetters{WorkspaceID: ws, EventIDs: []uuid.UUID{id}, By: op, Reason: reason}
	act, name := s.ops.Redrive, "redrive"
	if purge {
		act, name = s.ops.Purge, "purge"
	}
	done, err := act(r.Context(), p)
	if err != nil {
		s.fail(w, r, "outbox "+name, err)
		return
	}
	s.log.Info("console: outbox "+name, "operator", op, "workspace_id", ws.String(), "event_id", id.String(),
		"events", len(done), "reason", reason)
	if len(done) == 0 {
		name += "-none"
	}
	if purge {
		http.Redirect(w, r, "/outbox?done="+name, http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, "/outbox/event?"+url.Values{"workspace": {ws.String()}, "id": {id.String()}, "done": {name}}.Encode(),
		http.StatusSeeOther)
}

// queueView is one queue on the queues page.
type queueView struct {
	Name          string
	Counts        []stateCount
	OldestWaiting time.Duration
	// Failed are the latest failed jobs, those of one operation together (failureGroups).
	Failed []failureGroup
	Err    string
}

// failedJobView is a failed job with the operation its task belongs to, read from the job's
// data (the job envelope of app/worker: the workspace, and the request event's operation_id;
// nil when the job carries none), and, for a last look (domain.LastLookRequested), the
// failure it held.
type failedJobView struct {
	bullmq.FailedJob
	WorkspaceID, OperationID *uuid.UUID
	LastLook                 *domain.LastLook
}

func viewFailedJob(j bullmq.FailedJob) failedJobView {
	v := failedJobView{FailedJob: j}
	var env struct {
		WorkspaceID uuid.UUID `json:"workspace_id"`
		Payload     struct {
			OperationID uuid.UUID        `json:"operation_id"`
			LastLook    *domain.LastLook `json:"last_look"`
		} `json:"payload"`
	}
	if json.Unmarshal(j.Data, &env) == nil && env.WorkspaceID != uuid.Nil && env.Payload.OperationID != uuid.Nil {
		v.WorkspaceID, v.OperationID = &env.WorkspaceID, &env.Payload.OperationID
		if l := env.Payload.LastLook; l != nil && l.Code != "" {
			v.LastLook = l
		}
	}
	return v
}

// failureGroup is one failure on the queues page: the failed jobs of one operation (its
// attempt that failed and its last look, if that failed too), the latest first, or one job
// that names no operation.
type failureGroup struct {
	OperationID, WorkspaceID *uuid.UUID
	Jobs                     []failedJobView
}

// groupFailures groups jobs (the latest first) by operation, in the order of each
// operation's latest job.
func groupFailures(jobs []failedJobView) []failureGroup {
	var out []failureGroup
	at := map[uuid.UUID]int{}
	for _, j := range jobs {
		if j.OperationID != nil {
			if i, ok := at[*j.OperationID]; ok {
				out[i].Jobs = append(out[i].Jobs, j)
				continue
			}
			at[*j.OperationID] = len(out)
		}
		out = append(out, failureGroup{OperationID: j.OperationID, WorkspaceID: j.WorkspaceID, Jobs: []failedJobView{j}})
	}
	return out
}

type stateCount struct {
	State string
	N     int64
}

type queuesData struct {
	Enabled bool
	// States are the job states the counts are read for, in the order they are shown.
	States  []string
	Queues  []queueView
	Actions []QueueAction
}

func (s *Server) queuesPage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	d := queuesData{Enabled: s.cfg.BullMQ.Client != nil, States: bullmq.JobStates()}
	if d.Enabled {
		now := s.now()
		for _, q := range s.cfg.Queues {
			v := queueView{Name: q}
			counts, err := bullmq.QueueCounts(ctx, s.cfg.BullMQ, q)
			if err == nil {
				for _, st := range bullmq.JobStates() {
					v.Counts = append(v.Counts, stateCount{st, counts[st]})
				}
				var at time.Time
				var ok bool
				if at, ok, err = bullmq.OldestWaiting(ctx, s.cfg.BullMQ, q); err == nil && ok {
					v.OldestWaiting = now.Sub(at)
				}
			}
			if err == nil {
				var failed []bullmq.FailedJob
				failed, err = bullmq.FailedJobs(ctx, s.cfg.BullMQ, q, failedJobsLimit)
				views := make([]failedJobView, len(failed))
				for i, j := range failed {
					views[i] = viewFailedJob(j)
				}
				v.Failed = groupFailures(views)
			}
			if err != nil {
				s.log.Error("console: queue", "queue", q, "err", err)
				v.Err = "Redis did not answer for this queue (see the console's log)."
			}
			d.Queues = append(d.Queues, v)
		}
	}
	var err error
	if d.Actions, err = s.data.queueActions(ctx, actionsLimit); err != nil {
		s.fail(w, r, "queues", err)
		return
	}
	s.render(w, r, http.StatusOK, "queues", page{Title: "Queues", Notice: notices[r.URL.Query().Get("done")], Data: d})
}

// queueAction retries or removes one failed job, recorded in operator_actions.
func (s *Server) queueAction(w http.ResponseWriter, r *http.Request) {
	op := identityOf(r).Operator
	name := "retry"
	act := bullmq.RetryJob
	if strings.HasSuffix(r.URL.Path, "/remove") {
		name, act = "remove", bullmq.RemoveJob
	}
	queue, id := r.PostFormValue("queue"), r.PostFormValue("id")
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	if s.cfg.BullMQ.Client == nil || !s.knownQueue(queue) || id == "" || len(id) > maxJobIDLength ||
		len(queue)+1+len(id) > MaxActionTargetLength ||
		reason == "" || len(reason) > maxReasonLength {
		http.Error(w, fmt.Sprintf("bad request: a known queue, a job id and a reason of 1-%d bytes are required", maxReasonLength),
			http.StatusBadRequest)
		return
	}
	err := s.data.recorded(r.Context(), QueueAction{Operator: op, Action: "job " + name, Target: queue + "/" + id, Reason: reason},
		func(ctx context.Context) error { return act(ctx, s.cfg.BullMQ, queue, id) })
	switch {
	case errors.Is(err, bullmq.ErrJobNotFound), errors.Is(err, bullmq.ErrJobNotFailed):
		http.Error(w, "conflict: "+strings.TrimPrefix(errors.Unwrap(err).Error(), "bullmq: ")+
			" (reload the queues page)", http.StatusConflict)
		return
	case err != nil:
		s.fail(w, r, "job "+name, err)
		return
	}
	s.log.Info("console: job "+name, "operator", op, "queue", queue, "job_id", id, "reason", reason)
	http.Redirect(w, r, "/queues?done="+name, http.StatusSeeOther)
}

type operationsData struct {
	ID, Workspace string
	Operation     *Operation
	Failed        []Operation
	Searched      bool
}

func (s *Server) operationsPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := operationsData{ID: strings.TrimSpace(q.Get("id")), Workspace: strings.TrimSpace(q.Get("workspace"))}
	p := page{Title: "Operations", Data: &d}
	status := http.StatusOK
	if d.ID != "" {
		id, err := uuid.Parse(d.ID)
		if err != nil {
			p.Error, status = "The operation id must be an id.", http.StatusBadRequest
		} else if o, err := s.data.operation(r.Context(), id); errors.Is(err, errOperationNotFound) {
			p.Error, status = "No operation has this id.", http.StatusNotFound
		} else if err != nil {
			s.fail(w, r, "operations", err)
			return
		} else {
			d.Operation = &o
		}
	}
	if d.Workspace != "" {
		ws, err := uuid.Parse(d.Workspace)
		if err != nil {
			p.Error, status = "The workspace must be an id.", http.StatusBadRequest
		} else if d.Failed, err = s.data.failedOperations(r.Context(), ws, failedOpsLimit); err != nil {
			s.fail(w, r, "operations", err)
			return
		}
		d.Searched = err == nil
	}
	s.render(w, r, status, "operations", p)
}

// fail logs err and answers 500 without its text (it may name internals).
func (s *Server) fail(w http.ResponseWriter, r *http.Request, what string, err error) {
	s.log.Error("console: "+what, "operator", identityOf(r).Operator, "err", err)
	http.Error(w, "internal error: "+what+" failed (see the console's log)", http.StatusInternalServerError)
}
