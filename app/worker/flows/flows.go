// Package flows is the registry of the flows: the one place where a flow, registered in its
// own package (worker.Register), is listed. Everything the engine derives from the flows
// reads it: the task kinds and handlers of a process (Kinds, Handlers, built from what the
// process provides), the routing of request events (Routes), the queues consumed and
// published to (Queues), the reconciler's task tables (TaskTables), the operation types, and
// the start-up check that a process built every part of every flow (Check).
//
// Adding a flow: docs/adding-a-flow.md.
package flows

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/app/worker/aitask"
	"github.com/listingkit/listing/app/worker/listingupdate"
	"github.com/listingkit/listing/app/worker/mediaproc"
	"github.com/listingkit/listing/app/worker/productsync"
	"github.com/listingkit/listing/app/worker/publish"
	"github.com/listingkit/listing/app/worker/storedisconnect"
	"github.com/listingkit/listing/app/worker/storeverify"
	"github.com/listingkit/listing/app/worker/transfer"
	"github.com/listingkit/listing/app/worker/unpublish"
	"github.com/listingkit/listing/domain"
)

// all is the registry, in the order the docs list the flows.
var all = []worker.Registration{
	storeverify.Flow,
	mediaproc.Flow,
	transfer.Flow,
	publish.Flow,
	productsync.Flow,
	aitask.Flow,
	listingupdate.Flow,
	unpublish.Flow,
	storedisconnect.Flow,
}

// All returns the registered flows' declarations.
func All() []worker.Spec { return specs(all) }

func specs(regs []worker.Registration) []worker.Spec {
	out := make([]worker.Spec, len(regs))
	for i, r := range regs {
		out[i] = r.Spec
	}
	return out
}

// ByQueue returns the flow of queue q.
func ByQueue(q string) (worker.Spec, bool) {
	i := slices.IndexFunc(all, func(r worker.Registration) bool { return r.Queue == q })
	if i < 0 {
		return worker.Spec{}, false
	}
	return all[i].Spec, true
}

// Kinds builds the task kind of every flow from p, by queue. A flow whose kind needs what p
// lacks is named in the error, with the field it needs.
func Kinds(p worker.Provided) (map[string]worker.TaskKind, error) {
	out := map[string]worker.TaskKind{}
	var errs []error
	for _, r := range all {
		k, err := r.Kind(p)
		errs = append(errs, err)
		if err == nil {
			out[r.Queue] = k
		}
	}
	return out, errors.Join(errs...)
}

// Handlers builds the job handler of every flow from p, by queue; a process builds them
// once. A flow whose handler needs what p lacks is named in the error, with the field.
func Handlers(p worker.Provided) (map[string]worker.Handler, error) {
	out := map[string]worker.Handler{}
	var errs []error
	for _, r := range all {
		h, err := r.Handler(p)
		errs = append(errs, err)
		if err == nil {
			out[r.Queue] = h
		}
	}
	return out, errors.Join(errs...)
}

// TaskTables are the flows' task tables as the reconciler's queries find them
// (infra/postgres.StuckTasks).
func TaskTables() []port.TaskTable {
	out := make([]port.TaskTable, len(all))
	for i, r := range all {
		out[i] = port.TaskTable{Queue: r.Queue, Table: r.Table, AggregateType: r.Request.AggregateType(),
			AggregateColumn: r.AggregateColumn, TaskIDField: r.TaskIDField}
	}
	return out
}

// Queues lists the job queues of the flows, which workers consume.
func Queues() []string {
	out := make([]string, len(all))
	for i, s := range all {
		out[i] = s.Queue
	}
	return out
}

// OperationTypes lists the flows' operation types.
func OperationTypes() []string {
	out := make([]string, len(all))
	for i, s := range all {
		out[i] = s.Operation
	}
	return out
}

// Routes maps every domain event type to its destination: a flow's request event to its
// queue, an integration event to worker.StreamEvents. An event type is one or the other.
func Routes() map[string]string { return routes(All()) }

func routes(specs []worker.Spec) map[string]string {
	out := map[string]string{}
	for _, s := range specs {
		out[s.Request.EventType()] = s.Queue
	}
	for _, e := range domain.IntegrationEvents() {
		t := e.Sample.EventType()
		if _, job := out[t]; job {
			panic("flows.Routes: " + t + " is both a job's request event and an integration event")
		}
		out[t] = worker.StreamEvents
	}
	return out
}

// Validate checks the registry: every flow whole (worker.Registration.Check), and no two
// flows sharing a name, a queue, a table, a request event, an operation type or a command
// type.
func Validate() error { return validate(all) }

func validate(regs []worker.Registration) error {
	var errs []error
	for _, r := range regs {
		errs = append(errs, r.Check())
	}
	errs = append(errs, distinct(specs(regs)))
	return errors.Join(errs...)
}

// distinct reports the parts two flows share.
func distinct(specs []worker.Spec) error {
	var errs []error
	seen := map[string]string{}
	unique := func(s worker.Spec, part, v string) {
		if v == "" {
			return
		}
		if other, dup := seen[part+"\x00"+v]; dup {
			errs = append(errs, fmt.Errorf("flows %s and %s: the same %s %q", other, s.Name, part, v))
		}
		seen[part+"\x00"+v] = s.Name
	}
	for _, s := range specs {
		unique(s, "name", s.Name)
		unique(s, "queue", s.Queue)
		unique(s, "table", s.Table)
		unique(s, "operation type", s.Operation)
		if s.Request != nil {
			unique(s, "request event", s.Request.EventType())
		}
		for _, m := range s.Messages {
			unique(s, "command type", m.Type)
			unique(s, "command endpoint", m.Method+" "+m.Path)
		}
		if st := s.Start; st != nil {
			unique(s, "command type", st.Type)
			unique(s, "command endpoint", st.Method+" "+st.Path)
		}
	}
	return errors.Join(errs...)
}

// Check reports, by flow and part, what a process lacks to run every registered flow: a
// task kind (kinds, by queue), and, in a process that consumes jobs, a handler (handlers,
// by queue; nil in one that does not). A kind or handler of a queue no flow declares is
// refused too. cmd/app runs it at start-up.
func Check(kinds map[string]worker.TaskKind, handlers map[string]worker.Handler) error {
	errs := []error{Validate()}
	for _, s := range all {
		if kinds[s.Queue] == nil {
			errs = append(errs, fmt.Errorf("flow %s: no task kind for queue %s", s.Name, s.Queue))
		}
		if handlers != nil && handlers[s.Queue] == nil {
			errs = append(errs, fmt.Errorf("flow %s: no handler for queue %s", s.Name, s.Queue))
		}
	}
	for q := range kinds {
		if _, ok := ByQueue(q); !ok {
			errs = append(errs, fmt.Errorf("queue %s: a task kind, but no registered flow", q))
		}
	}
	for q := range handlers {
		if _, ok := ByQueue(q); !ok {
			errs = append(errs, fmt.Errorf("queue %s: a handler, but no registered flow", q))
		}
	}
	return errors.Join(errs...)
}

// Catalogue is the docs' table of the flows (docs/bullmq-wire.md, "Queues"): one row per
// flow, its queue, job name, task table, operation type and what starts it.
func Catalogue() string {
	var b strings.Builder
	b.WriteString("| queue | job name (= event type) | task table | operation type | started by |\n|---|---|---|---|---|\n")
	for _, s := range all {
		fmt.Fprintf(&b, "| `%s` | `%s` | `%s` | `%s` | %s |\n", s.Queue, s.Request.EventType(), s.Table, s.Operation, s.StartedBy)
	}
	return b.String()
}
