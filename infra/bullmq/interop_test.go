package bullmq_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/bullmq"
)

// scenarioJob is one job of the interop scenario, with the options in both
// the Go and the Node.js form and the outcome expected whoever runs it.
type scenarioJob struct {
	id        string
	data      behaviour
	goOpts    *bullmq.JobOptions // nil = publisher defaults
	nodeOpts  map[string]any
	state     string // completed | failed | gone
	atm       int
	stack     int
	exhausted bool
}

func defaultNodeOpts(id string) map[string]any {
	return map[string]any{
		"attempts": 3, "backoff": map[string]any{"type": "exponential", "delay": 1000},
		"removeOnComplete": bullmq.DefaultKeepCompleted, "removeOnFail": map[string]any{"age": 86400},
		"jobId": id,
	}
}

func scenario() []scenarioJob {
	var s []scenarioJob
	add := func(j scenarioJob) {
		j.id = uuid.NewString()
		j.data.EventID = j.id
		j.data.WorkspaceID = "ws-1"
		if j.nodeOpts == nil {
			j.nodeOpts = defaultNodeOpts(j.id)
		} else {
			j.nodeOpts["jobId"] = j.id
		}
		s = append(s, j)
	}
	for range 5 {
		add(scenarioJob{state: "completed", atm: 1})
	}
	add(scenarioJob{data: behaviour{Behave: "failUntil", FailUntil: 2},
		goOpts:   &bullmq.JobOptions{Attempts: 3, Backoff: &bullmq.Backoff{Type: "fixed", Delay: 50}},
		nodeOpts: map[string]any{"attempts": 3, "backoff": map[string]any{"type": "fixed", "delay": 50}},
		state:    "completed", atm: 3, stack: 2})
	add(scenarioJob{data: behaviour{Behave: "failUntil", FailUntil: 1},
		goOpts:   &bullmq.JobOptions{Attempts: 2, Backoff: &bullmq.Backoff{Type: "exponential", Delay: 30}},
		nodeOpts: map[string]any{"attempts": 2, "backoff": map[string]any{"type": "exponential", "delay": 30}},
		state:    "completed", atm: 2, stack: 1})
	add(scenarioJob{data: behaviour{Behave: "fail"},
		goOpts:   &bullmq.JobOptions{Attempts: 2, Backoff: &bullmq.Backoff{Type: "fixed", Delay: 20}},
		nodeOpts: map[string]any{"attempts": 2, "backoff": map[string]any{"type": "fixed", "delay": 20}},
		state:    "failed", atm: 2, stack: 2, exhausted: true})
	add(scenarioJob{data: behaviour{Behave: "unrecoverable"},
		goOpts:   &bullmq.JobOptions{Attempts: 5},
		nodeOpts: map[string]any{"attempts": 5},
		state:    "failed", atm: 1, stack: 1})
	add(scenarioJob{goOpts: &bullmq.JobOptions{Attempts: 1, RemoveOnComplete: &bullmq.KeepJobs{Remove: true}},
		nodeOpts: map[string]any{"attempts": 1, "removeOnComplete": true},
		state:    "gone", atm: 1})
	add(scenarioJob{data: behaviour{Behave: "fail"},
		goOpts:   &bullmq.JobOptions{Attempts: 1, RemoveOnFail: &bullmq.KeepJobs{Remove: true}},
		nodeOpts: map[string]any{"attempts": 1, "removeOnFail": true},
		state:    "gone", atm: 1, exhausted: true})
	return s
}

func goAddScenario(t *testing.T, b bundle, s []scenarioJob) {
	jobs := make([]bullmq.Job, len(s))
	for i, j := range s {
		jobs[i] = bullmq.Job{ID: j.id, Name: "test.event", Data: mustJSON(j.data), Opts: j.goOpts}
	}
	for _, r := range b.add(t, jobs...) {
		require.Equal(t, bullmq.Created, r.Status)
	}
}

func (b bundle) drained(t *testing.T, finished int64) func() bool {
	ctx := context.Background()
	return func() bool {
		if b.finished(t) != finished {
			return false
		}
		return b.rdb.LLen(ctx, b.key("wait")).Val() == 0 && b.rdb.LLen(ctx, b.key("active")).Val() == 0 &&
			b.rdb.ZCard(ctx, b.key("delayed")).Val() == 0
	}
}

func checkScenario(t *testing.T, s []scenarioJob, r nodeReport, by string) {
	t.Helper()
	var completed, failed, completedEv, failedEv, exhausted int
	for _, j := range s {
		nj := r.Jobs[j.id]
		switch j.state {
		case "completed":
			completed++
			completedEv++
		case "failed":
			failed++
			failedEv++
		case "gone":
			if j.data.Behave == "fail" {
				failedEv++
			} else {
				completedEv++
			}
		}
		if j.exhausted {
			exhausted++
		}
		assert.Equal(t, j.atm, r.PerJob[j.id]["active"], "active events of %s", j.id)
		if j.state == "gone" {
			assert.Nil(t, nj, "job %s should be removed", j.id)
			continue
		}
		if !assert.NotNil(t, nj, "job %s", j.id) {
			continue
		}
		assert.Equal(t, j.state, nj.State, "state of %s", j.id)
		assert.Equal(t, j.atm, nj.AttemptsMade, "attemptsMade of %s", j.id)
		assert.Equal(t, j.atm, nj.AttemptsStarted, "attemptsStarted of %s", j.id)
		assert.Len(t, nj.Stacktrace, j.stack, "stacktrace of %s", j.id)
		assert.NotZero(t, nj.FinishedOn, "finishedOn of %s", j.id)
		assert.Equal(t, "test.event", nj.Name)
		if j.state == "completed" {
			var rv struct {
				By      string `json:"by"`
				ID      string `json:"id"`
				Attempt int    `json:"attempt"`
			}
			require.NoError(t, json.Unmarshal(nj.ReturnValue, &rv), string(nj.ReturnValue))
			assert.Equal(t, j.id, rv.ID)
			assert.Equal(t, j.atm-1, rv.Attempt)
			if by != "" {
				assert.Equal(t, by, rv.By)
			}
		} else {
			assert.NotEmpty(t, nj.FailedReason)
		}
	}
	assert.Equal(t, completed, r.Counts["completed"], "getJobCounts completed")
	assert.Equal(t, failed, r.Counts["failed"], "getJobCounts failed")
	for _, st := range []string{"active", "wait", "delayed", "prioritized", "paused", "waiting-children"} {
		assert.Zero(t, r.Counts[st], "getJobCounts %s", st)
	}
	assert.Equal(t, len(s), r.Events["added"], "QueueEvents added")
	assert.Equal(t, completedEv, r.Events["completed"], "QueueEvents completed")
	assert.Equal(t, failedEv, r.Events["failed"], "QueueEvents failed")
	assert.Equal(t, exhausted, r.Events["retries-exhausted"], "QueueEvents retries-exhausted")
}

func scenarioIDs(s []scenarioJob) []string {
	ids := make([]string, len(s))
	for i, j := range s {
		ids[i] = j.id
	}
	return ids
}

func finishedCount(s []scenarioJob) int64 {
	var n int64
	for _, j := range s {
		if j.state != "gone" {
			n++
		}
	}
	return n
}

// Go publishes; unmodified Node.js Workers process everything.
func TestGoPublishNodeWorkers(t *testing.T) { testGoPublishNodeWorkers(t, setup(t)) }

func testGoPublishNodeWorkers(t *testing.T, b bundle) {
	requireNode(t)
	s := scenario()
	goAddScenario(t, b, s)
	w1 := b.startNodeWorker(t, map[string]any{"concurrency": 3})
	w2 := b.startNodeWorker(t, map[string]any{"concurrency": 3})
	waitFor(t, 30*time.Second, "scenario finished by Node workers", b.drained(t, finishedCount(s)))
	w1.stop(t)
	w2.stop(t)
	checkScenario(t, s, b.report(t, scenarioIDs(s)), "node")
}

// Node.js Queue.add / addBulk; the Go worker processes everything.
func TestNodeAddGoWorker(t *testing.T) { testNodeAddGoWorker(t, setup(t)) }

func testNodeAddGoWorker(t *testing.T, b bundle) {
	requireNode(t)
	s := scenario()
	var bulk, single []map[string]any
	for i, j := range s {
		spec := map[string]any{"name": "test.event", "data": j.data, "opts": j.nodeOpts}
		if i%2 == 0 {
			bulk = append(bulk, spec)
		} else {
			single = append(single, spec)
		}
	}
	b.nodeAdd(t, "addBulk", bulk)
	b.nodeAdd(t, "add", single)
	runWorker(t, b.worker(t, func(c *bullmq.WorkerConfig) { c.Concurrency = 3 }, behaveHandler(nil)))
	waitFor(t, 30*time.Second, "scenario finished by the Go worker", b.drained(t, finishedCount(s)))
	checkScenario(t, s, b.report(t, scenarioIDs(s)), "go")
}

// Go and Node.js consumers together on one queue, 2,000 jobs with mixed options.
func TestMixedConsumers2000(t *testing.T) { testMixedConsumers2000(t, setup(t)) }

func testMixedConsumers2000(t *testing.T, b bundle) {
	requireNode(t)
	const n = 2000
	// Every completed job stays, for the check below (the default keeps the newest 1,000).
	const keepAge = 7 * 24 * 3600
	keepAll := b.cfg
	keepAll.RemoveOnComplete = bullmq.KeepJobs{Age: keepAge}
	pub, err := bullmq.NewPublisher(bullmq.PublisherConfig{Config: keepAll}, nil)
	require.NoError(t, err)
	type want struct {
		state string
		atm   int
	}
	wants := map[string]want{}
	var goJobs []bullmq.Job
	var nodeJobs []map[string]any
	removed := 0
	for i := range n {
		id := uuid.NewString()
		data := behaviour{EventID: id}
		var opts *bullmq.JobOptions
		w := want{"completed", 1}
		switch i % 20 {
		case 14, 15:
			data.Behave, data.FailUntil = "failUntil", 1
			opts = &bullmq.JobOptions{Attempts: 3, Backoff: &bullmq.Backoff{Type: "fixed", Delay: 10}}
			w.atm = 2
		case 16:
			data.Behave = "fail"
			opts = &bullmq.JobOptions{Attempts: 2, Backoff: &bullmq.Backoff{Type: "fixed", Delay: 10}}
			w = want{"failed", 2}
		case 17:
			data.Behave = "unrecoverable"
			opts = &bullmq.JobOptions{Attempts: 3, Backoff: &bullmq.Backoff{Type: "fixed", Delay: 10}}
			w = want{"failed", 1}
		case 18:
			opts = &bullmq.JobOptions{Attempts: 1, RemoveOnComplete: &bullmq.KeepJobs{Remove: true}}
			w = want{"gone", 1}
			removed++
		case 19:
			data.Behave, data.FailUntil = "failUntil", 2
			opts = &bullmq.JobOptions{Attempts: 3, Backoff: &bullmq.Backoff{Type: "exponential", Delay: 5}}
			w.atm = 3
		}
		wants[id] = w
		if i%2 == 0 {
			goJobs = append(goJobs, bullmq.Job{ID: id, Name: "mixed.event", Data: mustJSON(data), Opts: opts})
			continue
		}
		no := defaultNodeOpts(id)
		no["removeOnComplete"] = map[string]any{"age": keepAge}
		if opts != nil {
			no = map[string]any{"jobId": id, "attempts": opts.Attempts}
			if opts.Backoff != nil {
				no["backoff"] = map[string]any{"type": opts.Backoff.Type, "delay": opts.Backoff.Delay}
			}
			if opts.RemoveOnComplete != nil {
				no["removeOnComplete"] = true
			}
		}
		nodeJobs = append(nodeJobs, map[string]any{"name": "mixed.event", "data": data, "opts": no})
	}
	var goStarts atomic.Int64
	runWorker(t, b.worker(t, func(c *bullmq.WorkerConfig) { c.Concurrency = 10 },
		behaveHandler(func(*bullmq.Job) { goStarts.Add(1) })))
	nw := b.startNodeWorker(t, map[string]any{"concurrency": 10})
	for start := 0; start < len(goJobs); start += 250 {
		_, err := pub.Add(context.Background(), b.queue, goJobs[start:min(start+250, len(goJobs))])
		require.NoError(t, err)
	}
	b.nodeAdd(t, "addBulk", nodeJobs)
	waitFor(t, 90*time.Second, "2000 jobs finished", b.drained(t, int64(n-removed)))
	nw.stop(t)

	ctx := context.Background()
	pipe := b.rdb.Pipeline()
	type probe struct {
		id             string
		atm            interface{ Val() string }
		inC, inF       interface{ Err() error }
		exists         interface{ Val() int64 }
		attemptsWanted int
	}
	var probes []probe
	totalAttempts := 0
	for id, w := range wants {
		probes = append(probes, probe{id: id, atm: pipe.HGet(ctx, b.key(id), "atm"),
			inC: pipe.ZScore(ctx, b.key("completed"), id), inF: pipe.ZScore(ctx, b.key("failed"), id),
			exists: pipe.Exists(ctx, b.key(id)), attemptsWanted: w.atm})
		totalAttempts += w.atm
	}
	_, _ = pipe.Exec(ctx)
	bad := 0
	for _, p := range probes {
		w := wants[p.id]
		var got string
		switch {
		case p.inC.Err() == nil:
			got = "completed"
		case p.inF.Err() == nil:
			got = "failed"
		case p.exists.Val() == 0:
			got = "gone"
		default:
			got = "other"
		}
		ok := got == w.state && (w.state == "gone" || p.atm.Val() == fmt.Sprint(w.atm))
		if !ok {
			bad++
			if bad < 10 {
				t.Errorf("job %s: state %s atm %s, want %s atm %d", p.id, got, p.atm.Val(), w.state, w.atm)
			}
		}
	}
	assert.Zero(t, bad, "jobs with unexpected outcome")
	nodeStarts := int64(nw.count("start", ""))
	t.Logf("attempts: go %d, node %d", goStarts.Load(), nodeStarts)
	assert.Positive(t, goStarts.Load())
	assert.Positive(t, nodeStarts)
	assert.Equal(t, int64(totalAttempts), goStarts.Load()+nodeStarts, "every attempt ran exactly once")
	r := b.report(t, nil)
	assert.Equal(t, n-removed-n/20*2, r.Counts["completed"])
	assert.Equal(t, n/20*2, r.Counts["failed"])
}

// A Go worker process is SIGKILLed while it holds a job; a Node.js worker
// beside it recovers the job with its stalled check and completes it.
func TestKillGoWorkerNodeRecovers(t *testing.T) { testKillGoWorkerNodeRecovers(t, setup(t)) }

func testKillGoWorkerNodeRecovers(t *testing.T, b bundle) {
	requireNode(t)
	j := job(behaviour{HoldFirstMs: 120000}, nil)
	b.add(t, j)
	child := startGoChild(t, b.redis, childConfig{Queue: b.queue, Prefix: "bull", QueueHashTags: b.cfg.QueueHashTags, Concurrency: 1, LockMs: 1000, StalledMs: 500})
	waitFor(t, 10*time.Second, "Go child took the job", func() bool { return child.count("start", j.ID) == 1 })
	nw := b.startNodeWorker(t, map[string]any{"lockDuration": 1000, "stalledInterval": 500})
	child.kill()
	waitFor(t, 20*time.Second, "job recovered and completed", func() bool { return b.finished(t) == 1 })
	nw.stop(t)
	assert.Equal(t, 1, nw.count("start", j.ID))
	r := b.report(t, []string{j.ID})
	nj := r.Jobs[j.ID]
	require.NotNil(t, nj)
	assert.Equal(t, "completed", nj.State)
	assert.Equal(t, 1, nj.AttemptsMade)
	assert.Equal(t, 2, nj.AttemptsStarted)
	assert.Contains(t, string(nj.ReturnValue), `"by":"node"`)
	assert.Equal(t, 1, r.PerJob[j.ID]["stalled"])
	assert.Equal(t, "1", b.rdb.HGet(context.Background(), b.key(j.ID), "stc").Val())
}

// A Node.js worker is SIGKILLed while it holds a job; the Go worker's own
// stalled check recovers the job and completes it.
func TestKillNodeWorkerGoRecovers(t *testing.T) { testKillNodeWorkerGoRecovers(t, setup(t)) }

func testKillNodeWorkerGoRecovers(t *testing.T, b bundle) {
	requireNode(t)
	j := job(behaviour{HoldFirstMs: 120000}, nil)
	b.add(t, j)
	nw := b.startNodeWorker(t, map[string]any{"lockDuration": 1000, "stalledInterval": 500})
	waitFor(t, 10*time.Second, "Node worker took the job", func() bool { return nw.count("start", j.ID) == 1 })
	var goStarts atomic.Int64
	runWorker(t, b.worker(t, func(c *bullmq.WorkerConfig) {
		c.LockDuration = time.Second
		c.StalledInterval = 300 * time.Millisecond
	}, behaveHandler(func(*bullmq.Job) { goStarts.Add(1) })))
	nw.kill()
	waitFor(t, 20*time.Second, "job recovered and completed", func() bool { return b.finished(t) == 1 })
	assert.Equal(t, int64(1), goStarts.Load())
	ctx := context.Background()
	h := b.rdb.HGetAll(ctx, b.key(j.ID)).Val()
	assert.Equal(t, "1", h["stc"])
	assert.Equal(t, "1", h["atm"])
	assert.Equal(t, "2", h["ats"])
	assert.Contains(t, h["returnvalue"], `"by":"go"`)
	assert.NotNil(t, b.rdb.ZScore(ctx, b.key("completed"), j.ID).Val())
}

// The same jobId published twice from Go, then once from Node.js: one job,
// processed once; also after it completed and was removed (the de: key lives).
func TestDuplicateJobID(t *testing.T) { testDuplicateJobID(t, setup(t)) }

func testDuplicateJobID(t *testing.T, b bundle) {
	requireNode(t)
	ctx := context.Background()
	id := uuid.NewString()
	opts := &bullmq.JobOptions{Attempts: 1, RemoveOnComplete: &bullmq.KeepJobs{Remove: true},
		Deduplication: &bullmq.Deduplication{ID: id, TTL: 60000}}
	nodeJob := []map[string]any{{"name": "dup.event", "data": map[string]any{"event_id": id},
		"opts": map[string]any{"jobId": id, "attempts": 1, "removeOnComplete": true, "deduplication": map[string]any{"id": id, "ttl": 60000}}}}
	j := bullmq.Job{ID: id, Name: "dup.event", Data: mustJSON(map[string]any{"event_id": id}), Opts: opts}

	res := b.add(t, j, j)
	assert.Equal(t, []bullmq.AddResult{{ID: id, Status: bullmq.Created}, {ID: id, Status: bullmq.Duplicate}}, res)
	assert.Equal(t, []string{id}, b.nodeAdd(t, "add", nodeJob))
	assert.Equal(t, int64(1), b.rdb.LLen(ctx, b.key("wait")).Val())

	var runs atomic.Int64
	stop := runWorker(t, b.worker(t, nil, func(context.Context, *bullmq.Job) (any, error) {
		runs.Add(1)
		return nil, nil
	}))
	waitFor(t, 10*time.Second, "job processed and removed", func() bool {
		return runs.Load() == 1 && b.rdb.Exists(ctx, b.key(id)).Val() == 0 && b.rdb.LLen(ctx, b.key("active")).Val() == 0
	})
	assert.Equal(t, bullmq.Deduplicated, b.add(t, j)[0].Status)
	assert.Equal(t, []string{id}, b.nodeAdd(t, "add", nodeJob))
	time.Sleep(500 * time.Millisecond)
	stop()
	assert.Equal(t, int64(1), runs.Load())
	assert.Zero(t, b.rdb.Exists(ctx, b.key(id)).Val())
	assert.Zero(t, b.rdb.LLen(ctx, b.key("wait")).Val())
	r := b.report(t, nil)
	assert.Equal(t, 1, r.Events["added"])
	assert.Equal(t, 2, r.Events["duplicated"])
	assert.Equal(t, 2, r.Events["deduplicated"])
	assert.Equal(t, 1, r.Events["completed"])
}

// A job added by Go is laid out exactly like the same job added by Node.js.
func TestAddLayoutMatchesNode(t *testing.T) {
	b := setup(t)
	requireNode(t)
	ctx := context.Background()
	nodeQueue := newQueue(t, newRedis(t), "bull")
	id := uuid.NewString()
	data := `{"event_id":"` + id + `","workspace_id":"ws","payload":{"a":1}}`
	b.add(t, bullmq.Job{ID: id, Name: "layout.event", Data: []byte(data)})
	var d map[string]any
	require.NoError(t, json.Unmarshal([]byte(data), &d))
	nodeAdd(t, "bull", nodeQueue, "add", []map[string]any{{"name": "layout.event", "data": d, "opts": defaultNodeOpts(id)}})

	goHash := b.rdb.HGetAll(ctx, b.key(id)).Val()
	nodeHash := b.rdb.HGetAll(ctx, "bull:"+nodeQueue+":"+id).Val()
	fields := func(h map[string]string) []string {
		var f []string
		for k := range h {
			f = append(f, k)
		}
		sort.Strings(f)
		return f
	}
	assert.Equal(t, fields(nodeHash), fields(goHash))
	for _, f := range []string{"name", "delay", "priority", "deid"} {
		assert.Equal(t, nodeHash[f], goHash[f], f)
	}
	assert.JSONEq(t, nodeHash["data"], goHash["data"])
	assert.JSONEq(t, nodeHash["opts"], goHash["opts"])

	events := func(q string) []string {
		var out []string
		for _, m := range b.rdb.XRange(ctx, "bull:"+q+":events", "-", "+").Val() {
			out = append(out, fmt.Sprint(m.Values["event"]))
		}
		return out
	}
	assert.Equal(t, events(nodeQueue), events(b.queue))
	assert.Equal(t, b.rdb.ZRangeWithScores(ctx, "bull:"+nodeQueue+":marker", 0, -1).Val(),
		b.rdb.ZRangeWithScores(ctx, b.key("marker"), 0, -1).Val())
	assert.Equal(t, b.rdb.HGet(ctx, "bull:"+nodeQueue+":meta", "opts.maxLenEvents").Val(),
		b.rdb.HGet(ctx, b.key("meta"), "opts.maxLenEvents").Val())
	suffixes := func(q string) []string {
		keys := b.rdb.Keys(ctx, "bull:"+q+":*").Val()
		for i, k := range keys {
			keys[i] = strings.TrimPrefix(k, "bull:"+q+":")
		}
		sort.Strings(keys)
		return keys
	}
	// The Go publisher also remembers the id in its dedup window's current bucket.
	goKeys := suffixes(b.queue)
	var buckets []string
	goKeys = slices.DeleteFunc(goKeys, func(k string) bool {
		if strings.HasPrefix(k, "dd:") {
			buckets = append(buckets, k)
			return true
		}
		return false
	})
	assert.Equal(t, suffixes(nodeQueue), goKeys)
	assert.Len(t, buckets, 1)
}
