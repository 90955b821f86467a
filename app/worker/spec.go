package worker

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/listingkit/listing/domain"
)

// Spec declares one flow to the engine, once, in the flow's package (app/worker/<flow>),
// through Register; app/worker/flows lists the registrations. The engine derives from the registry what it used
// to be told flow by flow: the routing of request events to queues, the queues consumed,
// the reconciler's stuck-task queries, the operation types, and the checks that a process
// starts with every part of every flow (flows.Check).
//
// A Spec says nothing of transactions: how the begin and record steps of jobs are grouped
// into transactions is the engine's choice (Flow), not the flow's.
type Spec struct {
	// Name names the flow in errors and docs (listing_update).
	Name string
	// Queue is the job queue of the flow's request events (docs/bullmq-wire.md). Stable.
	Queue string
	// Table is the task table (sql/): its lifecycle columns, RLS and discovery come from the
	// engine's prepare_task_table (sql/026_task_tables.sql).
	Table string
	// Request is a sample of the request event (domain.Requested.RequestEvent's type): its
	// EventType is routed to Queue, its AggregateType tells the outbox's rows of the task.
	Request domain.Event
	// TaskIDField is the JSON field of Request holding the task id (update_id).
	TaskIDField string
	// AggregateColumn is Table's column holding Request's AggregateID: "id" when the task is
	// its own aggregate, else the aggregate's id (store_id).
	AggregateColumn string
	// NotFound is the task's not-found error: the repository and the GET handler return it.
	NotFound *domain.Error
	// Operation is the operation type of the flow's operations (app/commands' Op… constant).
	Operation string
	// StartedBy says, for the docs' catalogue, what starts the flow.
	StartedBy string
	// Messages are the command types, sent as messages (docs/integrations.md), that start the
	// flow; none when the flow is started over HTTP only.
	Messages []Message
	// LastLook says what the flow asks its upstream before it records a final failure, or
	// why the upstream cannot be asked (Asks, CannotAsk).
	LastLook LastLook
	// Start, when set, is the flow's task-starting entry point, derived by the engine from
	// this declaration and the task kind's Accept (start.go): the command type, its route,
	// endpoint row and errors. It needs Resource (the task's JSON key and body).
	Start *Start
	// Resource is the HTTP resource of the flow's tasks under their parent: infra/httpapi
	// derives its GET routes (one task, and the list) and their endpoints. Nil when the
	// flow's tasks are served by routes of their own.
	Resource *Resource
}

// Resource is how the API serves a flow's tasks that live under a parent:
// GET /v1/workspaces/{workspace_id}<Parent>/<Path> (newest first) and …/<Path>/{<IDParam>}.
type Resource struct {
	// Parent is the parent's path under /v1/workspaces/{workspace_id}; its last segment is
	// the parent's id parameter, which is also the task table's column naming the parent
	// ("/publications/{publication_id}").
	Parent string
	// ParentTable is the parent's table; ParentNotFound its not-found error (an unknown or
	// malformed parent id).
	ParentTable    string
	ParentNotFound *domain.Error
	// Path is the tasks' segment under Parent (updates), IDParam the task id's parameter
	// (update_id), Key the JSON key of one task ({"update": …}).
	Path, IDParam, Key string
	// GetOperation and ListOperation are the operationIds of the two routes.
	GetOperation, ListOperation string
	// Body is the JSON of one task (a value of the flow's task type).
	Body func(task any) any
}

// ParentParam is the parent's id parameter, the last segment of Parent without its braces.
func (r Resource) ParentParam() string {
	last := r.Parent[strings.LastIndex(r.Parent, "/")+1:]
	if !strings.HasPrefix(last, "{") || !strings.HasSuffix(last, "}") {
		return ""
	}
	return last[1 : len(last)-1]
}

// ErrorJSON is the error of a failed task or operation as the API shows it: its code and
// client-safe message.
type ErrorJSON struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// TaskError is t's error for the API, or nil unless t failed.
func TaskError(t domain.Task) *ErrorJSON {
	if t.Status != domain.TaskFailed {
		return nil
	}
	return &ErrorJSON{Code: t.ErrorCode, Message: t.ErrorMessage}
}

// Message is a command type other services may send as a message (docs/integrations.md). It
// runs through the HTTP endpoint of Method and Path (under /v1/workspaces/{workspace_id});
// its data is the endpoint's body plus the path's {ids} by name. infra/httpapi finds the
// endpoint among its routes, and refuses to start when it serves none.
type Message struct {
	// Type is the command type (listing.publish).
	Type string
	// Method and Path are the endpoint's (POST, /products/{product_id}/publications).
	Method, Path string
}

// LastLook is a flow's answer to "before a final failure, can the upstream tell whether
// the work was done after all?": either how it asks, or why it cannot.
type LastLook struct {
	// Asks says what the flow asks (publication: find the product by external_ref).
	Asks string
	// CannotAsk says why the upstream cannot be asked (a verification changes nothing
	// upstream).
	CannotAsk string
}

// Asks declares a last look: what the flow asks its upstream before a final failure.
func Asks(what string) LastLook { return LastLook{Asks: what} }

// CannotAsk declares that the flow's upstream cannot be asked before a final failure, and why.
func CannotAsk(why string) LastLook { return LastLook{CannotAsk: why} }

// Check reports every part s lacks, each named ("flow listing_update: no queue"), joined;
// nil when s is whole.
func (s Spec) Check() error {
	name := s.Name
	if name == "" {
		name = "(unnamed)"
	}
	var errs []error
	missing := func(part string) { errs = append(errs, fmt.Errorf("flow %s: %s", name, part)) }
	if s.Name == "" {
		missing("no name")
	}
	if s.Queue == "" {
		missing("no queue")
	}
	if s.Table == "" {
		missing("no task table")
	}
	if s.Request == nil {
		missing("no request event")
	} else {
		if s.Request.EventType() == "" || s.Request.AggregateType() == "" {
			missing("a request event without an event type or aggregate type")
		}
		if !registered(s.Request) {
			missing(fmt.Sprintf("request event %s not registered (domain.RegisterEvent)", s.Request.EventType()))
		}
		if s.TaskIDField == "" {
			missing("no task id field")
		} else if !hasJSONField(s.Request, s.TaskIDField) {
			missing(fmt.Sprintf("request event %s has no field %q (its task id)", s.Request.EventType(), s.TaskIDField))
		}
	}
	if s.AggregateColumn == "" {
		missing("no aggregate column")
	}
	switch {
	case s.NotFound == nil:
		missing("no not-found error")
	case s.NotFound.Kind != domain.KindNotFound:
		missing(fmt.Sprintf("a not-found error %s that is not of KindNotFound", s.NotFound.Code))
	}
	if s.Operation == "" {
		missing("no operation type")
	}
	if s.StartedBy == "" {
		missing("no description of what starts it (StartedBy)")
	}
	switch l := s.LastLook; {
	case l.Asks == "" && l.CannotAsk == "":
		missing("no last look, nor a statement that the upstream cannot be asked")
	case l.Asks != "" && l.CannotAsk != "":
		missing("both a last look and a statement that the upstream cannot be asked")
	}
	if r := s.Resource; r != nil {
		if r.ParentParam() == "" || r.ParentTable == "" || r.ParentNotFound == nil {
			missing("a task resource without its parent (Parent ending in {id param}, ParentTable, ParentNotFound)")
		}
		if r.Path == "" || r.IDParam == "" || r.Key == "" || r.GetOperation == "" || r.ListOperation == "" || r.Body == nil {
			missing("a task resource without Path, IDParam, Key, GetOperation, ListOperation or Body")
		}
	}
	if st := s.Start; st != nil {
		switch {
		case !strings.HasPrefix(st.Type, "listing."):
			missing(fmt.Sprintf("an entry point whose command type %q is outside listing.*", st.Type))
		case st.Method == "" || !strings.HasPrefix(st.Path, "/") || st.OperationID == "":
			missing(fmt.Sprintf("entry point %s: no Method, Path or OperationID", st.Type))
		case s.Resource == nil:
			missing(fmt.Sprintf("entry point %s: no Resource (the task's JSON)", st.Type))
		case strings.Count(st.Path, "{") != len(st.NotFound):
			missing(fmt.Sprintf("entry point %s: not one not-found error per id of %s", st.Type, st.Path))
		}
	}
	for _, m := range s.Messages {
		if !strings.HasPrefix(m.Type, "listing.") {
			missing(fmt.Sprintf("a command type %q outside listing.*", m.Type))
		}
		if m.Method == "" || !strings.HasPrefix(m.Path, "/") {
			missing(fmt.Sprintf("command type %s: no endpoint (Method and Path)", m.Type))
		}
	}
	return errors.Join(errs...)
}

// registered reports whether e's type was registered with domain.RegisterEvent.
func registered(e domain.Event) bool {
	return slices.ContainsFunc(domain.RegisteredEvents(), func(r domain.Event) bool {
		return reflect.TypeOf(r) == reflect.TypeOf(e)
	})
}

// hasJSONField reports whether the struct e marshals a field named name.
func hasJSONField(e any, name string) bool {
	t := reflect.TypeOf(e)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return false
	}
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == name || (tag == "" && f.Name == name) {
			return true
		}
	}
	return false
}
