package bullmq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// HandlerFunc processes one job. It returns the job's return value (stored
// as JSON in "returnvalue"; json.RawMessage is stored as given) and nil to
// complete it; an error to fail this attempt (retried with the job's backoff
// while attempts remain); Unrecoverable(err) to fail the job at once; or
// ErrHandBack to put the job back without counting an attempt. ctx is
// cancelled when the worker gives up waiting during shutdown.
//
// A job may run more than once (stalled recovery, redelivery): handlers
// deduplicate on domain state.
type HandlerFunc func(ctx context.Context, job *Job) (any, error)

// Worker consumes one queue the way a Node.js BullMQ 6 Worker does, and can
// run beside Node.js workers on the same queue. Run it once.
type Worker struct {
	cfg     WorkerConfig
	keys    queueKeys
	handler HandlerFunc
	logger  watermill.LoggerAdapter
	token   string
	seq     atomic.Int64
	running atomic.Bool

	mu   sync.Mutex
	held map[string]*Job // jobs this worker holds a lock on

	inflight  atomic.Int64
	slotFreed chan struct{}
	ageTrimAt atomic.Int64  // when (unix ms) a finish call last trimmed finished jobs by age
	renewing  chan struct{} // holds a token while a renewal is in flight
}

// NewWorker returns a Worker for cfg.Queue.
func NewWorker(cfg WorkerConfig, handler HandlerFunc) (*Worker, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("bullmq.NewWorker: %w", err)
	}
	if handler == nil {
		return nil, errors.New("bullmq.NewWorker: handler is nil")
	}
	return &Worker{
		cfg:       cfg,
		keys:      cfg.keys(cfg.Queue),
		handler:   handler,
		logger:    cfg.Logger.With(watermill.LogFields{"queue": cfg.Queue}),
		token:     uuid.NewString(),
		held:      map[string]*Job{},
		slotFreed: make(chan struct{}, 1),
		renewing:  make(chan struct{}, 1),
	}, nil
}

type finishKind int

const (
	finishComplete finishKind = iota
	finishFail
	finishRetry
	finishHandBack
	finishSnooze
	finishWait
)

type finishReq struct {
	job   *Job
	kind  finishKind
	value string // returnvalue JSON or failedReason
	stack string // stacktrace JSON
	delay int64
	done  chan struct{}
}

// Run takes and processes jobs until ctx is done, then shuts down: it stops
// taking jobs (within DrainDelay) and waits up to ShutdownTimeout for running
// handlers, renewing their locks meanwhile, so that a handler finishes (and
// records) what it started. Only a handler that returns ErrHandBack gives its
// job back to wait. Past ShutdownTimeout their context is cancelled; a
// cancelled handler's job is abandoned (ErrAbandon): left locked, no longer
// renewed, for the stalled check once the lock ran out, so that nobody runs it
// while a call it cut short may still land. Run returns nil after shutdown, or
// an error if the worker is already running.
//
// A job whose lock is lost while its handler runs (a renewal refused, or
// renewals failing until the lock may have run out) has its handler's context
// cancelled at once and is not finished by this worker.
func (w *Worker) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("bullmq.Worker.Run: already running")
	}
	defer w.running.Store(false)
	// A previous Run may have abandoned jobs: start from a clean slate.
	w.inflight.Store(0)
	w.mu.Lock()
	w.held = map[string]*Job{}
	w.mu.Unlock()

	base := context.WithoutCancel(ctx)
	jobCtx, cancelJobs := context.WithCancel(base)
	defer cancelJobs()
	bgCtx, stopBg := context.WithCancel(base)
	var bg sync.WaitGroup
	rs := &runState{runCtx: ctx, jobCtx: jobCtx, bgCtx: bgCtx, finishCh: make(chan *finishReq, 2*w.cfg.Concurrency)}

	bg.Add(finishers + 1)
	for range finishers {
		go func() { defer bg.Done(); w.finisher(rs) }()
	}
	go func() { defer bg.Done(); w.renewer(bgCtx) }()
	if !w.cfg.DisableStalledCheck {
		bg.Add(1)
		go func() { defer bg.Done(); w.stalledChecker(ctx) }()
	}

	w.fetchLoop(rs)

	done := make(chan struct{})
	go func() { rs.jobs.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(w.cfg.ShutdownTimeout):
		w.logger.Error("bullmq: jobs still running past the shutdown timeout: cancelled, left to their locks", nil,
			watermill.LogFields{"running": w.inflight.Load()})
		cancelJobs()
		select {
		case <-done:
		case <-time.After(time.Second):
			w.logger.Error("bullmq: jobs left running at shutdown; stalled check will recover them", nil,
				watermill.LogFields{"running": w.inflight.Load()})
		}
	}
	stopBg()
	bg.Wait()
	return nil
}

// runState is what the goroutines of one Run share.
type runState struct {
	runCtx   context.Context // done: stop taking jobs
	jobCtx   context.Context // handlers' context, cancelled after ShutdownTimeout
	bgCtx    context.Context // finisher and renewer, cancelled when Run returns
	finishCh chan *finishReq
	jobs     sync.WaitGroup // running process goroutines
}

// fetchLoop takes jobs while slots are free; the finisher also takes jobs
// for the slots it frees ("fetch next"). inflight counts reserved slots:
// only fetchLoop increases it, so free slots can only grow between the read
// and the reservation.
func (w *Worker) fetchLoop(rs *runState) {
	ctx := rs.runCtx
	errDelay := 100 * time.Millisecond
	for ctx.Err() == nil {
		free := int64(w.cfg.Concurrency) - w.inflight.Load()
		if free <= 0 {
			select {
			case <-w.slotFreed:
			case <-ctx.Done():
			}
			continue
		}
		w.inflight.Add(free)
		taken, next, limited, err := w.take(base(ctx), int(free))
		w.start(rs, taken)
		w.release(free - int64(len(taken)))
		if err != nil {
			w.logger.Error("bullmq: take failed", err, nil)
			sleepCtx(ctx, errDelay)
			errDelay = min(errDelay*2, 5*time.Second)
			continue
		}
		errDelay = 100 * time.Millisecond
		if len(taken) == int(free) {
			continue // wait may hold more
		}
		// A partial take left wait empty (and did not re-add the marker): wait on the
		// marker, which the next add sets.
		if limited > 0 {
			sleepCtx(ctx, min(limited, w.cfg.DrainDelay))
			continue
		}
		timeout := w.cfg.DrainDelay
		if next > 0 {
			d := time.Until(time.UnixMilli(next))
			if d <= 0 {
				continue
			}
			timeout = min(timeout, d)
		}
		w.waitMarker(base(ctx), timeout)
	}
}

// start runs taken jobs, each on a reserved slot.
func (w *Worker) start(rs *runState, taken []*Job) {
	if len(taken) == 0 {
		return
	}
	w.mu.Lock()
	for _, j := range taken {
		w.held[j.ID] = j
	}
	w.mu.Unlock()
	for _, j := range taken {
		rs.jobs.Add(1)
		go func() {
			defer rs.jobs.Done()
			w.process(rs, j)
		}()
	}
}

// release frees n reserved slots.
func (w *Worker) release(n int64) {
	if n <= 0 {
		return
	}
	w.inflight.Add(-n)
	select {
	case w.slotFreed <- struct{}{}:
	default:
	}
}

func base(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// waitMarker blocks on the queue's marker for at most timeout, and at least a millisecond:
// BZPOPMIN's timeout has millisecond resolution and 0 means "forever", so a shorter wait
// (a delayed job due in under a millisecond) is rounded up, never down to 0.
func (w *Worker) waitMarker(ctx context.Context, timeout time.Duration) {
	var err error
	if timeout >= time.Second {
		err = w.cfg.Client.BZPopMin(ctx, timeout.Truncate(time.Second), w.keys.marker).Err()
	} else {
		ms := max(1, (timeout+time.Millisecond-1)/time.Millisecond)
		err = w.cfg.Client.Do(ctx, "BZPOPMIN", w.keys.marker, strconv.FormatFloat(float64(ms)/1000, 'f', 3, 64)).Err()
	}
	if err != nil && err != redis.Nil {
		w.logger.Error("bullmq: waiting on marker failed", err, nil)
		time.Sleep(100 * time.Millisecond)
	}
}

// take moves up to n jobs to active under this worker's locks.
func (w *Worker) take(ctx context.Context, n int) (jobs []*Job, nextDelayedMs int64, limited time.Duration, err error) {
	k := w.keys
	first := w.seq.Add(int64(n)) - int64(n)
	sent := time.Now()
	res, err := takeScript.Run(ctx, w.cfg.Client,
		[]string{k.wait, k.active, k.prioritized, k.events, k.limiter, k.delayed, k.meta, k.pc, k.marker},
		k.base, sent.UnixMilli(), w.token, first, w.cfg.LockDuration.Milliseconds(), n, w.cfg.Name).Slice()
	if err != nil {
		return nil, 0, 0, fmt.Errorf("bullmq.take: %w", err)
	}
	jobs, nextDelayedMs, limited = w.parseTaken(res, sent)
	return jobs, nextDelayedMs, limited, nil
}

// parseTaken reads the {jobs, nextDelayedMs, rateLimitTTLms} of takeJobs,
// whose locks were set no earlier than sent.
func (w *Worker) parseTaken(res []any, sent time.Time) (jobs []*Job, nextDelayedMs int64, limited time.Duration) {
	flat, _ := res[0].([]any)
	nextDelayedMs, _ = res[1].(int64)
	ttl, _ := res[2].(int64)
	for i := 0; i+2 < len(flat); i += 3 {
		id, _ := flat[i].(string)
		tok, _ := flat[i+1].(string)
		hash, _ := flat[i+2].([]any)
		j, perr := parseJob(id, tok, hash)
		if perr != nil {
			w.logger.Error("bullmq: job has unreadable fields", perr, watermill.LogFields{"job_id": id})
		}
		j.lockedUntil = sent.Add(w.cfg.LockDuration)
		jobs = append(jobs, j)
	}
	return jobs, nextDelayedMs, time.Duration(ttl) * time.Millisecond
}

func (w *Worker) process(rs *runState, j *Job) {
	req := &finishReq{job: j, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(rs.jobCtx)
	defer cancel()
	w.mu.Lock()
	j.cancel = cancel
	lost := j.lost
	w.mu.Unlock()
	if lost {
		cancel()
	}
	if j.deferred != "" {
		if f := w.cfg.DeferredFailureFunc; f != nil {
			if err := f(ctx, j, j.deferred); err != nil {
				w.logger.Error("bullmq: recording a deferred failure failed", err, watermill.LogFields{"job_id": j.ID})
			}
		}
		w.failRequest(req, Unrecoverable(errors.New(j.deferred)))
	} else {
		res, err := w.call(ctx, j)
		var snooze snoozeError
		switch {
		case w.lost(j):
			w.abandon(j, "its lock was lost while its handler ran")
			return
		case errors.Is(err, ErrAbandon) || (rs.jobCtx.Err() != nil && errors.Is(err, context.Canceled)):
			w.abandon(j, "its handler was cancelled (shutdown) or gave it up")
			return
		case err == nil:
			req.kind = finishComplete
			req.value = returnValueJSON(res)
		case errors.Is(err, ErrHandBack):
			req.kind = finishHandBack
		case errors.As(err, &snooze):
			req.kind, req.delay = finishSnooze, snooze.delay.Milliseconds()
			if snooze.wait {
				req.kind = finishWait
			}
		default:
			w.failRequest(req, err)
		}
	}
	select {
	case rs.finishCh <- req:
	case <-rs.bgCtx.Done():
		return
	}
	select {
	case <-req.done:
	case <-rs.bgCtx.Done():
	}
}

// lost reports whether j's lock was lost while this worker held it.
func (w *Worker) lost(j *Job) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return j.lost
}

// abandon leaves j to its lock (see ErrAbandon): no longer held, so no longer
// renewed, and not finished; its slot is freed.
func (w *Worker) abandon(j *Job, why string) {
	w.mu.Lock()
	if w.held[j.ID] == j {
		delete(w.held, j.ID)
	}
	w.mu.Unlock()
	w.logger.Info("bullmq: job left to its lock; the stalled check takes it back once the lock ran out",
		watermill.LogFields{"job_id": j.ID, "reason": why})
	w.release(1)
}

func (w *Worker) call(ctx context.Context, j *Job) (res any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("bullmq: handler panicked: %v", r)
		}
	}()
	return w.handler(ctx, j)
}

func returnValueJSON(res any) string {
	switch v := res.(type) {
	case nil:
		return "null"
	case json.RawMessage:
		if json.Valid(v) {
			return string(v)
		}
	}
	b, err := json.Marshal(res)
	if err != nil {
		return "null"
	}
	return string(b)
}

// failRequest decides between retry and final failure the way BullMQ's
// Job.moveToFailed does.
func (w *Worker) failRequest(req *finishReq, err error) {
	j := req.job
	reason := err.Error()
	trace := append([]string{}, j.Stacktrace...)
	trace = append(trace, reason)
	if lim := j.Opts.StackTraceLimit; lim != nil {
		if *lim == 0 {
			trace = []string{}
		} else if len(trace) > *lim {
			trace = trace[len(trace)-*lim:]
		}
	}
	b, _ := json.Marshal(trace)
	req.value = reason
	req.stack = string(b)
	req.kind = finishFail
	if !IsUnrecoverable(err) && j.AttemptsMade+1 < j.Opts.Attempts {
		req.kind = finishRetry
		req.delay = backoffDelay(j.Opts.Backoff, j.AttemptsMade)
	}
}

// finisher settles finished jobs in batches (one EVALSHA per finishChunk
// jobs, all chunks in one pipeline) and, unless Run is stopping, takes new
// jobs for the freed slots in the same call.
func (w *Worker) finisher(rs *runState) {
	batch := make([]*finishReq, 0, 4*finishChunk)
	for {
		batch = batch[:0]
		select {
		case r := <-rs.finishCh:
			batch = append(batch, r)
		case <-rs.bgCtx.Done():
			return
		}
		// Collect what else is ready; when most running jobs are about to
		// finish, linger a little so they share the round trip.
		linger := time.NewTimer(finishLinger)
	collect:
		for len(batch) < cap(batch) {
			select {
			case r := <-rs.finishCh:
				batch = append(batch, r)
				continue
			default:
			}
			if int64(len(batch)) >= w.inflight.Load()/2 {
				break
			}
			select {
			case r := <-rs.finishCh:
				batch = append(batch, r)
			case <-linger.C:
				break collect
			}
		}
		linger.Stop()
		fetch := 0
		if rs.runCtx.Err() == nil {
			fetch = len(batch)
		}
		// Stop renewing the jobs being settled (their locks go with them),
		// before holding the taken ones: the same job may be among both
		// (retried or handed back, then taken again).
		w.mu.Lock()
		for _, r := range batch {
			if w.held[r.job.ID] == r.job {
				delete(w.held, r.job.ID)
			}
		}
		w.mu.Unlock()
		taken := w.finishBatch(rs.bgCtx, batch, fetch)
		w.start(rs, taken)
		w.release(int64(len(batch) - len(taken)))
		for _, r := range batch {
			close(r.done)
		}
	}
}

// finishers is how many goroutines settle finished jobs: while one waits for
// Redis, the other collects the next batch.
const finishers = 2

// finishChunk is how many jobs one EVALSHA of the finish script settles.
const finishChunk = 64

// finishLinger bounds how long the finisher waits for more finished jobs
// before settling a batch smaller than half the running jobs. Each call
// costs Redis about eight commands besides those of its jobs (and the worker
// a round trip), but a slot waits as long: at 1,250 jobs/s with 50 running,
// 500 µs made batches of about 3.7 jobs.
const finishLinger = 500 * time.Microsecond

func (w *Worker) finishBatch(ctx context.Context, batch []*finishReq, fetch int) []*Job {
	sent := time.Now()
	now := sent.UnixMilli()
	var calls []scriptCall
	for start := 0; start < len(batch); start += finishChunk {
		end := min(start+finishChunk, len(batch))
		n := 0
		if end == len(batch) {
			n = fetch
		}
		calls = append(calls, w.finishCall(batch[start:end], now, n))
	}
	var cmds []*redis.Cmd
	var err error
	delay := 100 * time.Millisecond
	for attempt := 0; ; attempt++ {
		cmds, err = runPipelined(base(ctx), w.cfg.Client, calls)
		if err == nil || attempt == 4 {
			break
		}
		w.logger.Error("bullmq: finishing jobs failed, retrying", err, nil)
		sleepCtx(ctx, delay)
		delay *= 2
	}
	if err != nil {
		w.logger.Error("bullmq: finishing jobs failed; their locks expire and the stalled check retries them", err,
			watermill.LogFields{"jobs": len(batch)})
		return nil
	}
	var taken []*Job
	for c, cmd := range cmds {
		res, cerr := cmd.Slice()
		if cerr != nil {
			w.logger.Error("bullmq: finishing jobs failed", cerr, watermill.LogFields{"jobs": len(calls[c].args)})
			continue
		}
		codes, _ := res[0].([]any)
		for i, v := range codes {
			code, _ := v.(int64)
			if code >= 0 {
				continue
			}
			r := batch[c*finishChunk+i]
			w.logger.Error("bullmq: finishing job failed", finishError(code),
				watermill.LogFields{"job_id": r.job.ID, "outcome": r.kind})
		}
		if c == len(cmds)-1 && fetch > 0 {
			taken, _, _ = w.parseTaken(res[1:], sent)
		}
	}
	return taken
}

// ageTrimEvery is how often (at most) a Worker's finish calls trim finished
// jobs by age: each trim reads the finished set, and a job past its age is
// left a second longer at most.
const ageTrimEvery = time.Second

// trimAge returns the finish script's ARGV[8]: "1" when this call trims by
// age (none did within ageTrimEvery), else "0".
func (w *Worker) trimAge(now int64) string {
	last := w.ageTrimAt.Load()
	if now-last >= ageTrimEvery.Milliseconds() && w.ageTrimAt.CompareAndSwap(last, now) {
		return "1"
	}
	return "0"
}

func finishError(code int64) error {
	switch code {
	case -1:
		return errors.New("job missing")
	case -2:
		return errors.New("lock missing (expired: another worker may run the job)")
	case -3:
		return errors.New("job not in active")
	case -6:
		return errors.New("lock held by another worker")
	}
	return fmt.Errorf("code %d", code)
}

func (w *Worker) finishCall(reqs []*finishReq, now int64, fetch int) scriptCall {
	k := w.keys
	keys := make([]string, 0, 12+3*len(reqs))
	keys = append(keys, k.wait, k.active, k.prioritized, k.events, k.stalled, k.meta,
		k.completed, k.failed, k.marker, k.delayed, k.pc, k.limiter)
	first := w.seq.Add(int64(fetch)) - int64(fetch)
	args := make([]any, 0, 8+12*len(reqs))
	args = append(args, now, k.base, fetch, w.token, first, w.cfg.LockDuration.Milliseconds(), w.cfg.Name, w.trimAge(now))
	for _, r := range reqs {
		j := r.job
		// A de: key with a TTL outlives the job (BullMQ leaves it alone on
		// finishing); one without is removed if it still names this job.
		dedupKey, dedupID := k.job(j.ID), ""
		if j.dedupID != "" && (j.Opts.Deduplication == nil || j.Opts.Deduplication.TTL <= 0) {
			dedupKey, dedupID = k.dedup(j.dedupID), j.dedupID
		}
		keys = append(keys, k.job(j.ID), k.lock(j.ID), dedupKey)
		kind := "completed"
		keep := j.Opts.RemoveOnComplete
		switch r.kind {
		case finishFail:
			kind, keep = "failed", j.Opts.RemoveOnFail
		case finishRetry:
			kind = "retry"
		case finishHandBack:
			kind = "handback"
		case finishSnooze:
			kind = "snooze"
		case finishWait:
			kind = "wait"
		}
		count, age, limit := keep.keepArgs()
		args = append(args, j.ID, j.token, kind, r.value, count, age, limit, j.Opts.Attempts, r.stack, dedupID, r.delay,
			j.AttemptsMade+1)
	}
	return scriptCall{script: finishScript, keys: keys, args: args}
}

// renewer extends the locks of held jobs every LockDuration/2. A failed
// renewal is tried again every renewRetry (LockDuration/10), so several times
// within the half of the lock left; a job whose lock was refused, or whose
// lock may run out before the next try, is lost: its handler's context is
// cancelled at once (before any further call) and the worker does not finish
// it (process abandons it).
func (w *Worker) renewer(ctx context.Context) {
	retry := w.renewRetry()
	t := time.NewTimer(w.cfg.LockDuration / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.mu.Lock()
		held := make([]*Job, 0, len(w.held))
		for _, j := range w.held {
			if !j.lost {
				held = append(held, j)
			}
		}
		w.mu.Unlock()
		failed := !w.extendAll(ctx, held, retry)
		next := w.cfg.LockDuration / 2
		if failed {
			next = retry
			w.expire(time.Now().Add(retry))
		}
		t.Reset(next)
	}
}

// extendAll renews the locks of held within wait: it reports false when Redis
// did not answer every renewal in time. A renewal still pending then goes on
// in the background (its answer still counts, extend records it); the next
// try waits for it instead of piling up.
func (w *Worker) extendAll(ctx context.Context, held []*Job, wait time.Duration) bool {
	select {
	case w.renewing <- struct{}{}:
	default:
		return false // the previous renewal has not answered yet
	}
	done := make(chan bool, 1)
	go func() {
		defer func() { <-w.renewing }()
		ok := true
		for start := 0; start < len(held); start += 500 {
			if !w.extend(ctx, held[start:min(start+500, len(held))]) {
				ok = false
			}
		}
		done <- ok
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case ok := <-done:
		return ok
	case <-t.C:
		return false
	}
}

// renewRetry is the wait before a failed renewal is tried again.
func (w *Worker) renewRetry() time.Duration { return max(w.cfg.LockDuration/10, time.Millisecond) }

// expire marks lost every held job whose lock may have run out by then.
func (w *Worker) expire(by time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, j := range w.held {
		if !j.lost && !j.lockedUntil.After(by) {
			w.loseLocked(j, "renewals failed until the lock may have run out")
		}
	}
}

// loseLocked marks j lost and cancels its handler. w.mu is held.
func (w *Worker) loseLocked(j *Job, why string) {
	j.lost = true
	if j.cancel != nil {
		j.cancel()
	}
	w.logger.Error("bullmq: lost the lock of a running job; its handler is cancelled", nil,
		watermill.LogFields{"job_id": j.ID, "reason": why})
}

// extend renews the locks of jobs; it reports false when the renewal failed
// (Redis did not answer), true when Redis answered, whatever it answered.
func (w *Worker) extend(ctx context.Context, jobs []*Job) bool {
	keys := make([]string, 1, len(jobs)+1)
	keys[0] = w.keys.stalled
	args := make([]any, 1, 2*len(jobs)+1)
	args[0] = w.cfg.LockDuration.Milliseconds()
	for _, j := range jobs {
		keys = append(keys, w.keys.lock(j.ID))
		args = append(args, j.token)
	}
	for _, j := range jobs {
		args = append(args, j.ID)
	}
	sent := time.Now()
	res, err := extendScript.Run(base(ctx), w.cfg.Client, keys, args...).Int64Slice()
	if err != nil {
		w.logger.Error("bullmq: renewing locks failed; trying again", err, nil)
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, ok := range res {
		j := jobs[i]
		// A job settled since the snapshot has no lock any more: not a loss.
		if w.held[j.ID] != j || j.lost {
			continue
		}
		if ok != 0 {
			j.lockedUntil = sent.Add(w.cfg.LockDuration)
			continue
		}
		w.loseLocked(j, "the renewal found the lock gone or held by another worker")
	}
	return true
}

// stalledChecker runs the stalled check now and every StalledInterval.
func (w *Worker) stalledChecker(ctx context.Context) {
	t := time.NewTicker(w.cfg.StalledInterval)
	defer t.Stop()
	maxStalled := w.cfg.MaxStalledCount
	if maxStalled < 0 {
		maxStalled = 0
	}
	for {
		k := w.keys
		ids, err := stalledScript.Run(base(ctx), w.cfg.Client,
			[]string{k.stalled, k.wait, k.active, k.stalledChk, k.meta, k.marker, k.events},
			maxStalled, k.base, time.Now().UnixMilli(), w.cfg.StalledInterval.Milliseconds()).StringSlice()
		if err != nil {
			w.logger.Error("bullmq: stalled check failed", err, nil)
		} else if len(ids) > 0 {
			w.logger.Info("bullmq: moved stalled jobs back to wait", watermill.LogFields{"job_ids": ids})
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
