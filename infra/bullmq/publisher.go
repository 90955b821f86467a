package bullmq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
)

// ErrPublisherClosed is returned by Publish and Add after Close.
var ErrPublisherClosed = errors.New("bullmq: publisher closed")

// AddStatus tells what Add did with one job.
type AddStatus int

const (
	// Created: the job was stored and is waiting.
	Created AddStatus = iota + 1
	// Duplicate: a job with this jobId exists (in any state); nothing written.
	Duplicate
	// Deduplicated: the job is gone but its id is still remembered (Config.DedupWindow, or
	// the de: key of a job with its own Deduplication option); nothing written.
	Deduplicated
)

func (s AddStatus) String() string {
	switch s {
	case Created:
		return "created"
	case Duplicate:
		return "duplicate"
	case Deduplicated:
		return "deduplicated"
	}
	return "unknown"
}

// AddResult is the outcome for one job of an Add call.
type AddResult struct {
	ID     string
	Status AddStatus
}

// Publisher adds standard BullMQ jobs. It is safe for concurrent use.
type Publisher struct {
	cfg    PublisherConfig
	logger watermill.LoggerAdapter
	// defOpts is the opts JSON of the Config defaults (defaultOptions), cut where the job
	// id goes: the parts joined by the id as a JSON string.
	defOpts [][]byte

	mu     sync.RWMutex // held for reading by every Add; for writing by Close
	closed bool
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher. logger may be nil.
func NewPublisher(cfg PublisherConfig, logger watermill.LoggerAdapter) (*Publisher, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("bullmq.NewPublisher: %w", err)
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	p := &Publisher{cfg: cfg, logger: logger}
	const mark = "\"JOB-ID-HERE\""
	b, err := p.defaultOptions().marshal("JOB-ID-HERE")
	if err != nil {
		return nil, fmt.Errorf("bullmq.NewPublisher: %w", err)
	}
	p.defOpts = bytes.Split(b, []byte(mark))
	return p, nil
}

// Publish adds one job per message to the queue named topic, all in one
// pipelined round trip: jobId = msg.UUID, job name = metadata
// MetadataJobName, data = msg.Payload as given (it must be JSON for Node.js
// workers to read it), the remaining metadata in the hash field "wm". A
// jobId already present is not an error (the job is kept as it was). Publish
// gives up when any message's context is done.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	jobs := make([]Job, len(msgs))
	ctxs := make([]context.Context, len(msgs))
	for i, m := range msgs {
		jobs[i] = Job{ID: m.UUID, Name: m.Metadata.Get(MetadataJobName), Data: m.Payload, Metadata: m.Metadata}
		ctxs[i] = m.Context()
	}
	ctx, cancel := mergeContexts(ctxs)
	defer cancel()
	res, err := p.Add(ctx, topic, jobs)
	if err != nil {
		return fmt.Errorf("bullmq.Publish: %w", err)
	}
	for _, r := range res {
		if r.Status != Created {
			p.logger.Debug("bullmq: job not added again", watermill.LogFields{"queue": topic, "job_id": r.ID, "status": r.Status.String()})
		}
	}
	return nil
}

// mergeContexts returns a context cancelled when any of ctxs is done.
func mergeContexts(ctxs []context.Context) (context.Context, context.CancelFunc) {
	first := ctxs[0]
	ctx, cancel := context.WithCancel(first)
	var stops []func() bool
	for _, c := range ctxs[1:] {
		if c == first || c == context.Background() {
			continue
		}
		if c.Err() != nil {
			cancel()
			break
		}
		stops = append(stops, context.AfterFunc(c, cancel))
	}
	return ctx, func() {
		for _, s := range stops {
			s()
		}
		cancel()
	}
}

// Add adds jobs to queue in one pipelined round trip and reports, per job
// and in order, whether it was created or was a duplicate. A Job's Opts, when
// nil, come from the Config defaults; its ID must pass ValidateJobID. A
// non-nil error means some jobs may have been added and others not: retrying
// the whole call is safe, duplicates are reported as such.
func (p *Publisher) Add(ctx context.Context, queue string, jobs []Job) ([]AddResult, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return nil, fmt.Errorf("bullmq.Add: %w", ErrPublisherClosed)
	}
	if queue == "" || strings.Contains(queue, ":") {
		return nil, fmt.Errorf("bullmq.Add: invalid queue name %q", queue)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("bullmq.Add: %w", err)
	}
	keys := p.cfg.keys(queue)
	nowMs := time.Now().UnixMilli()
	now := strconv.FormatInt(nowMs, 10)
	buckets, expireAt := p.dedupBuckets(keys, nowMs)
	var calls []scriptCall
	for start := 0; start < len(jobs); start += addChunk {
		c := scriptCall{
			script: addScript,
			keys:   append([]string{keys.wait, keys.meta, keys.id, keys.active, keys.events, keys.marker}, buckets...),
			args:   []any{now, len(buckets), expireAt},
		}
		for i := start; i < min(start+addChunk, len(jobs)); i++ {
			if err := p.appendJob(&c, keys, &jobs[i]); err != nil {
				return nil, fmt.Errorf("bullmq.Add: job %d: %w", i, err)
			}
		}
		calls = append(calls, c)
	}
	cmds, err := runPipelined(ctx, p.cfg.Client, calls)
	if err != nil {
		return nil, fmt.Errorf("bullmq.Add: %w", err)
	}
	out := make([]AddResult, 0, len(jobs))
	for _, cmd := range cmds {
		v, err := cmd.Slice()
		if err != nil {
			return nil, fmt.Errorf("bullmq.Add: %w", err)
		}
		for i := 0; i+1 < len(v); i += 2 {
			code, _ := v[i].(int64)
			id, _ := v[i+1].(string)
			st := Created
			switch code {
			case 0:
				st = Duplicate
			case 2:
				st = Deduplicated
			}
			out = append(out, AddResult{ID: id, Status: st})
		}
	}
	if len(out) != len(jobs) {
		return nil, fmt.Errorf("bullmq.Add: %d results for %d jobs", len(out), len(jobs))
	}
	return out, nil
}

// addChunk is how many jobs one EVALSHA of the add script carries; the
// chunks of one Add call share one pipeline (one round trip).
const addChunk = 50

// dedupBuckets is how many time buckets one DedupWindow spans.
const dedupBuckets = 8

// dedupBuckets returns the bucket sets an add at nowMs checks (the current
// one first, then the dedupBuckets before it: every add since nowMs-DedupWindow
// is in one of them) and the current bucket's expiry (unix ms): a window
// after the bucket ends, plus a bucket for clocks that differ. None when
// DedupWindow is negative.
func (p *Publisher) dedupBuckets(keys queueKeys, nowMs int64) ([]string, int64) {
	w := p.cfg.DedupWindow.Milliseconds()
	if w <= 0 {
		return nil, 0
	}
	width := (w + dedupBuckets - 1) / dedupBuckets
	cur := nowMs / width
	out := make([]string, 0, dedupBuckets+1)
	for b := cur; b >= cur-dedupBuckets; b-- {
		out = append(out, keys.dedupBucket(b))
	}
	return out, (cur+1)*width + w + width
}

// dedupMember is how a job id is remembered in a bucket set: a UUID as its
// 16 bytes, any other id as it is.
func dedupMember(id string) string {
	if len(id) != 36 || id[8] != '-' || id[13] != '-' || id[18] != '-' || id[23] != '-' {
		return id
	}
	var b [16]byte
	j := 0
	for i := 0; i < 36; i += 2 {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			i--
			continue
		}
		hi, ok1 := unhex(id[i])
		lo, ok2 := unhex(id[i+1])
		if !ok1 || !ok2 {
			return id
		}
		b[j] = hi<<4 | lo
		j++
	}
	return string(b[:])
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func (p *Publisher) appendJob(c *scriptCall, keys queueKeys, j *Job) error {
	if err := ValidateJobID(j.ID); err != nil {
		return err
	}
	var optsJSON []byte
	var dedupID, member string
	var ttl int64
	if opts := j.Opts; opts != nil {
		var err error
		if optsJSON, err = opts.marshal(j.ID); err != nil {
			return err
		}
		if opts.Deduplication != nil {
			dedupID = opts.Deduplication.ID
			ttl = opts.Deduplication.TTL
		}
	} else {
		// defaultOptions(), marshalled with j.ID, from the parts cut once.
		id := appendJSONString(nil, j.ID)
		n := len(id) * (len(p.defOpts) - 1)
		for _, part := range p.defOpts {
			n += len(part)
		}
		optsJSON = make([]byte, 0, n)
		for i, part := range p.defOpts {
			if i > 0 {
				optsJSON = append(optsJSON, id...)
			}
			optsJSON = append(optsJSON, part...)
		}
		if p.cfg.DedupWindow > 0 {
			member = dedupMember(j.ID)
		}
	}
	var wm []byte
	if len(j.Metadata) > 0 {
		wm = appendMapJSON(nil, j.Metadata)
	}
	dedupKey := keys.job(j.ID)
	if dedupID != "" {
		dedupKey = keys.dedup(dedupID)
	}
	data := j.Data
	if data == nil {
		data = []byte("{}")
	}
	c.keys = append(c.keys, keys.job(j.ID), dedupKey)
	c.args = append(c.args, j.ID, j.Name, data, optsJSON, ttl, dedupID, wm, member)
	return nil
}

// defaultOptions are the options of a job added without its own.
func (p *Publisher) defaultOptions() *JobOptions {
	b := p.cfg.Backoff
	keep := p.cfg.RemoveOnComplete
	return &JobOptions{
		Attempts:         p.cfg.Attempts,
		Backoff:          &b,
		RemoveOnComplete: &keep,
		RemoveOnFail:     &KeepJobs{Age: int64(p.cfg.RemoveOnFailAge / time.Second)},
	}
}

// Close makes later Publish and Add calls fail and waits for running ones.
// It does not close the Redis client. It is idempotent.
func (p *Publisher) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	return nil
}

// scriptCall is one EVALSHA of a pipeline.
type scriptCall struct {
	script *redis.Script
	keys   []string
	args   []any
}

// runPipelined runs calls with EVALSHA in one pipeline. Calls answered with
// NOSCRIPT (they did not run) are loaded and sent again in a second pipeline.
func runPipelined(ctx context.Context, rdb redis.UniversalClient, calls []scriptCall) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(calls))
	pipe := rdb.Pipeline()
	for i, c := range calls {
		cmds[i] = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx)
	var retry []int
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			retry = append(retry, i)
		} else if err != nil && !isScriptReplyError(err) {
			return nil, err
		}
	}
	if len(retry) == 0 {
		return cmds, nil
	}
	loaded := map[*redis.Script]bool{}
	for _, i := range retry {
		s := calls[i].script
		if loaded[s] {
			continue
		}
		if err := s.Load(ctx, rdb).Err(); err != nil {
			return nil, err
		}
		loaded[s] = true
	}
	pipe = rdb.Pipeline()
	for _, i := range retry {
		c := calls[i]
		cmds[i] = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx)
	for _, i := range retry {
		if err := cmds[i].Err(); err != nil && !isScriptReplyError(err) {
			return nil, err
		}
	}
	return cmds, nil
}

// isScriptReplyError reports whether err is Redis answering one command
// (the connection is fine), as opposed to a network or context error.
func isScriptReplyError(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && err != redis.Nil
}
