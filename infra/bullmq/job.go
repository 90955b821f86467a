package bullmq

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// MetadataJobName is the watermill metadata key whose value becomes the job
// name (the event type) when publishing, and which carries the job name on
// consumed messages.
const MetadataJobName = "event_type"

// Job is a BullMQ job. Publishers read ID, Name, Data, Metadata and Opts (nil
// means the Config defaults); the Worker fills every field from the job hash.
type Job struct {
	// ID is the jobId (for our jobs, the outbox event id).
	ID string
	// Name is the job name (for our jobs, the event type).
	Name string
	// Data is the job data exactly as stored: a JSON document.
	Data []byte
	// Metadata is watermill metadata stored beside the job (hash field "wm");
	// Node.js BullMQ ignores it.
	Metadata map[string]string
	// Opts are the job options as BullMQ stores them.
	Opts *JobOptions

	// Timestamp is when the job was added.
	Timestamp time.Time
	// ProcessedOn is when the current attempt started.
	ProcessedOn time.Time
	// AttemptsMade counts finished attempts ("atm") before this one.
	AttemptsMade int
	// AttemptsStarted counts taken attempts ("ats"), this one included.
	AttemptsStarted int
	// StalledCounter counts stalls ("stc").
	StalledCounter int
	// Snoozes counts the times the job was snoozed ("snz", see Snooze), and Snoozed their
	// total delay ("snzms"). Node.js BullMQ ignores both fields.
	Snoozes int
	Snoozed time.Duration
	// FailedReason of the previous attempt, if any.
	FailedReason string
	// Stacktrace of the previous failed attempts, oldest first. Entries
	// written by this package are the error strings (Go errors carry no stack).
	Stacktrace []string

	token    string // lock token of this attempt
	deferred string // "defa": fail without running the handler
	dedupID  string // "deid"

	// Guarded by the Worker's mu while the worker holds the job.
	lockedUntil time.Time          // the lock runs out no earlier than this (local clock)
	lost        bool               // the lock was lost, or may have run out: the handler was cancelled
	cancel      context.CancelFunc // cancels the handler's context
}

// JobOptions are the BullMQ job options this package writes and reads.
// Unknown options written by Node.js stay in Raw.
type JobOptions struct {
	Attempts         int
	Backoff          *Backoff
	RemoveOnComplete *KeepJobs
	RemoveOnFail     *KeepJobs
	// Deduplication is BullMQ's "de" {id, ttl ms}.
	Deduplication   *Deduplication
	StackTraceLimit *int
	// Raw is the opts JSON as read from Redis (consumer side only).
	Raw json.RawMessage
}

// Deduplication is BullMQ's deduplication option: while the key
// "<prefix>:<queue>:de:<ID>" lives (TTL ms; 0 = until the job finishes),
// adding a job with the same deduplication id is ignored.
type Deduplication struct {
	ID  string `json:"id"`
	TTL int64  `json:"ttl,omitempty"`
}

// KeepJobs is BullMQ's removeOnComplete / removeOnFail. nil keeps every
// finished job. Remove deletes the job when it finishes (BullMQ's true).
// Otherwise Age (seconds) and Count (newest n) bound what is kept; a zero
// Age or Count is no bound. Limit caps deletions per finish (default 1000).
type KeepJobs struct {
	Remove bool
	Age    int64
	Count  int
	Limit  int
}

// MarshalJSON writes the forms Node.js BullMQ accepts: true, a number, or {age, count, limit}.
func (k KeepJobs) MarshalJSON() ([]byte, error) {
	if k.Remove {
		return []byte("true"), nil
	}
	if k.Age == 0 && k.Limit == 0 && k.Count > 0 {
		return []byte(strconv.Itoa(k.Count)), nil
	}
	var b bytes.Buffer
	b.WriteByte('{')
	sep := ""
	if k.Age > 0 {
		fmt.Fprintf(&b, `"age":%d`, k.Age)
		sep = ","
	}
	if k.Count > 0 {
		fmt.Fprintf(&b, `%s"count":%d`, sep, k.Count)
		sep = ","
	}
	if k.Limit > 0 {
		fmt.Fprintf(&b, `%s"limit":%d`, sep, k.Limit)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads true/false, a number or an object.
func (k *KeepJobs) UnmarshalJSON(b []byte) error {
	*k = KeepJobs{}
	s := string(bytes.TrimSpace(b))
	switch {
	case s == "true":
		k.Remove = true
		return nil
	case s == "false" || s == "null":
		return nil
	case len(s) > 0 && s[0] == '{':
		var o struct {
			Age   *float64 `json:"age"`
			Count *float64 `json:"count"`
			Limit *float64 `json:"limit"`
		}
		if err := json.Unmarshal(b, &o); err != nil {
			return err
		}
		if o.Age != nil {
			k.Age = int64(*o.Age)
		}
		if o.Count != nil {
			k.Count = int(*o.Count)
			if k.Count == 0 {
				k.Remove = true
			}
		}
		if o.Limit != nil {
			k.Limit = int(*o.Limit)
		}
		return nil
	default:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("bullmq: bad removeOn value %s", s)
		}
		k.Count = int(f)
		if k.Count <= 0 {
			k.Remove = k.Count == 0
			k.Count = 0
		}
		return nil
	}
}

// keepArgs turns k into the finish script's count, age and limit arguments.
func (k *KeepJobs) keepArgs() (count, age string, limit int) {
	limit = 1000
	if k == nil {
		return "-1", "", limit
	}
	if k.Limit > 0 {
		limit = k.Limit
	}
	if k.Remove {
		return "0", "", limit
	}
	if k.Count > 0 {
		count = strconv.Itoa(k.Count)
	}
	if k.Age > 0 {
		age = strconv.FormatInt(k.Age, 10)
	}
	if count == "" && age == "" {
		count = "-1"
	}
	return count, age, limit
}

type optsJSON struct {
	Attempts         int            `json:"attempts"`
	Backoff          *Backoff       `json:"backoff,omitempty"`
	RemoveOnComplete *KeepJobs      `json:"removeOnComplete,omitempty"`
	RemoveOnFail     *KeepJobs      `json:"removeOnFail,omitempty"`
	JobID            string         `json:"jobId,omitempty"`
	De               *Deduplication `json:"de,omitempty"`
	StackTraceLimit  *int           `json:"stackTraceLimit,omitempty"`
}

func (o *JobOptions) marshal(jobID string) ([]byte, error) {
	return json.Marshal(optsJSON{
		Attempts:         o.Attempts,
		Backoff:          o.Backoff,
		RemoveOnComplete: o.RemoveOnComplete,
		RemoveOnFail:     o.RemoveOnFail,
		JobID:            jobID,
		De:               o.Deduplication,
		StackTraceLimit:  o.StackTraceLimit,
	})
}

func parseOptions(raw string) (*JobOptions, error) {
	var o struct {
		Attempts         float64         `json:"attempts"`
		Backoff          json.RawMessage `json:"backoff"`
		RemoveOnComplete *KeepJobs       `json:"removeOnComplete"`
		RemoveOnFail     *KeepJobs       `json:"removeOnFail"`
		De               *Deduplication  `json:"de"`
		StackTraceLimit  *int            `json:"stackTraceLimit"`
	}
	if raw == "" {
		raw = "{}"
	}
	if err := json.Unmarshal([]byte(raw), &o); err != nil {
		return nil, err
	}
	opts := &JobOptions{
		Attempts:         int(o.Attempts),
		RemoveOnComplete: o.RemoveOnComplete,
		RemoveOnFail:     o.RemoveOnFail,
		Deduplication:    o.De,
		StackTraceLimit:  o.StackTraceLimit,
		Raw:              json.RawMessage(raw),
	}
	if b := bytes.TrimSpace(o.Backoff); len(b) > 0 && string(b) != "null" {
		var bo struct {
			Type  string  `json:"type"`
			Delay float64 `json:"delay"`
		}
		if b[0] == '{' {
			if err := json.Unmarshal(b, &bo); err != nil {
				return nil, err
			}
		} else {
			bo.Type = BackoffFixed
			if err := json.Unmarshal(b, &bo.Delay); err != nil {
				return nil, err
			}
		}
		opts.Backoff = &Backoff{Type: bo.Type, Delay: int64(bo.Delay)}
	}
	return opts, nil
}

// optsCache holds the options parsed from opts JSON with the job's id, as a JSON string,
// cut out (idMark in its place): the jobs of one producer differ only there (jobId, de.id). At most
// optsCacheMax entries; the parsed options are never changed.
var (
	optsCache     sync.Map // string → *JobOptions
	optsCacheSize atomic.Int64
)

const (
	optsCacheMax = 256
	idMark       = "\ue000" // a private-use character
)

// parseJobOptions is parseOptions(raw) for the job id, through optsCache.
func parseJobOptions(id, raw string) (*JobOptions, error) {
	if id == "" || raw == "" || strings.Contains(raw, idMark) || strings.Contains(id, idMark) {
		return parseOptions(raw)
	}
	tmpl := strings.ReplaceAll(raw, `"`+id+`"`, `"`+idMark+`"`)
	v, ok := optsCache.Load(tmpl)
	if !ok {
		t, err := parseOptions(tmpl)
		if err != nil || (t.Backoff != nil && t.Backoff.Type == idMark) {
			return parseOptions(raw)
		}
		if optsCacheSize.Add(1) <= optsCacheMax {
			optsCache.Store(tmpl, t)
		}
		v = t
	}
	o := *v.(*JobOptions)
	o.Raw = json.RawMessage(raw)
	if d := o.Deduplication; d != nil && d.ID == idMark {
		o.Deduplication = &Deduplication{ID: id, TTL: d.TTL}
	}
	return &o, nil
}

// parseJob builds a Job from the flat HGETALL reply of the take script.
func parseJob(id, token string, flat []any) (*Job, error) {
	j := &Job{ID: id, token: token}
	var opts string
	for i := 0; i+1 < len(flat); i += 2 {
		k, _ := flat[i].(string)
		v, _ := flat[i+1].(string)
		switch k {
		case "name":
			j.Name = v
		case "data":
			j.Data = []byte(v)
		case "opts":
			opts = v
		case "timestamp":
			j.Timestamp = msTime(v)
		case "processedOn":
			j.ProcessedOn = msTime(v)
		case "atm":
			j.AttemptsMade, _ = strconv.Atoi(v)
		case "ats":
			j.AttemptsStarted, _ = strconv.Atoi(v)
		case "stc":
			j.StalledCounter, _ = strconv.Atoi(v)
		case "snz":
			j.Snoozes, _ = strconv.Atoi(v)
		case "snzms":
			ms, _ := strconv.ParseInt(v, 10, 64)
			j.Snoozed = time.Duration(ms) * time.Millisecond
		case "failedReason":
			j.FailedReason = v
		case "stacktrace":
			_ = json.Unmarshal([]byte(v), &j.Stacktrace)
		case "defa":
			j.deferred = v
		case "deid":
			j.dedupID = v
		case "wm":
			j.Metadata = parseMapJSON(v)
		}
	}
	o, err := parseJobOptions(id, opts)
	if err != nil {
		j.Opts = &JobOptions{Raw: json.RawMessage(opts)}
		return j, fmt.Errorf("bullmq: job %s has bad opts: %w", id, err)
	}
	j.Opts = o
	return j, nil
}

func msTime(v string) time.Time {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f == 0 {
		return time.Time{}
	}
	return time.UnixMilli(int64(f))
}

// backoffDelay is BullMQ's built-in strategy for the attempt that just
// failed; attemptsMade counts attempts before it.
func backoffDelay(b *Backoff, attemptsMade int) int64 {
	if b == nil {
		return 0
	}
	switch b.Type {
	case BackoffExponential:
		f := float64(b.Delay)
		for range attemptsMade {
			f *= 2
		}
		return int64(f + 0.5)
	default:
		return b.Delay
	}
}

// ValidateJobID reports whether id is a custom jobId BullMQ accepts: not
// empty, not an integer, no ':'. Node.js checks this in JavaScript, not Lua,
// so a Go producer must check it too.
func ValidateJobID(id string) error {
	if id == "" {
		return errors.New("bullmq: empty job id")
	}
	digits := id
	if digits[0] == '-' || digits[0] == '+' {
		digits = digits[1:]
	}
	allDigits := digits != ""
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			allDigits = false
			break
		}
	}
	if allDigits {
		return fmt.Errorf("bullmq: job id %q is an integer", id)
	}
	if bytes.IndexByte([]byte(id), ':') >= 0 {
		return fmt.Errorf("bullmq: job id %q contains ':'", id)
	}
	return nil
}

// unrecoverableError marks an error that fails the job without retries.
type unrecoverableError struct{ err error }

func (e unrecoverableError) Error() string { return e.err.Error() }
func (e unrecoverableError) Unwrap() error { return e.err }

// Unrecoverable wraps err so that the Worker fails the job at once, whatever
// attempts remain (BullMQ's UnrecoverableError).
func Unrecoverable(err error) error {
	if err == nil {
		err = errors.New("unrecoverable")
	}
	return unrecoverableError{err: err}
}

// IsUnrecoverable reports whether err was wrapped by Unrecoverable.
func IsUnrecoverable(err error) bool {
	var u unrecoverableError
	return errors.As(err, &u)
}

// snoozeError is returned by Snooze.
type snoozeError struct {
	delay time.Duration
	err   error
	wait  bool // Wait: not counted in Snoozes and Snoozed
}

func (e snoozeError) Error() string { return fmt.Sprintf("snoozed for %s: %v", e.delay, e.err) }
func (e snoozeError) Unwrap() error { return e.err }

// Snooze, returned by a handler, moves the job to delayed for delay (at least 1 ms) without
// counting an attempt: attemptsMade stays as it was, and the job's Snoozes and Snoozed grow.
// err is the reason, for the caller's logs; it is not stored.
func Snooze(delay time.Duration, err error) error {
	return snoozeError{delay: max(delay, time.Millisecond), err: err}
}

// Wait, returned by a handler, moves the job to delayed for delay (at least 1 ms) like
// Snooze, but counts nothing: neither an attempt nor a snooze. For a job that waits for a
// budget of the consumer's own (a rate limit), which says nothing of the job's health.
func Wait(delay time.Duration, err error) error {
	return snoozeError{delay: max(delay, time.Millisecond), err: err, wait: true}
}

// ErrHandBack, returned (or wrapped) by a handler, puts the job back at the
// front of wait without counting an attempt. Return it only for a job whose
// handler made no external call (another worker takes it at once).
var ErrHandBack = errors.New("bullmq: job handed back")

// ErrAbandon, returned (or wrapped) by a handler, leaves the job as it is:
// still locked by this worker, no longer renewed, not finished. Once the lock
// runs out the stalled check moves it back to wait (and counts a stall). It is
// what a handler whose work may still land upstream (a call cut short by
// shutdown) returns: nobody else runs the job before its lock, at least twice
// any call's time-out, has run out. A handler whose context was cancelled by
// shutdown or by the loss of its lock is abandoned the same way.
var ErrAbandon = errors.New("bullmq: job abandoned to its lock")
