package bullmq

import "strconv"

// queueKeys are the Redis keys of one queue, "<prefix>:<queue>:<suffix>".
type queueKeys struct {
	base        string // "<prefix>:<queue>:", the job key prefix
	wait        string
	active      string
	prioritized string
	delayed     string
	completed   string
	failed      string
	stalled     string
	stalledChk  string
	marker      string
	meta        string
	id          string
	events      string
	pc          string
	limiter     string
}

func newQueueKeys(prefix, queue string) queueKeys {
	b := prefix + ":" + queue + ":"
	return queueKeys{
		base:        b,
		wait:        b + "wait",
		active:      b + "active",
		prioritized: b + "prioritized",
		delayed:     b + "delayed",
		completed:   b + "completed",
		failed:      b + "failed",
		stalled:     b + "stalled",
		stalledChk:  b + "stalled-check",
		marker:      b + "marker",
		meta:        b + "meta",
		id:          b + "id",
		events:      b + "events",
		pc:          b + "pc",
		limiter:     b + "limiter",
	}
}

func (k queueKeys) job(id string) string   { return k.base + id }
func (k queueKeys) lock(id string) string  { return k.base + id + ":lock" }
func (k queueKeys) dedup(id string) string { return k.base + "de:" + id }

// dedupBucket is the set of the job ids added in time bucket n (Config.DedupWindow).
func (k queueKeys) dedupBucket(n int64) string { return k.base + "dd:" + strconv.FormatInt(n, 10) }
