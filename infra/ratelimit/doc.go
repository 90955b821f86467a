// Package ratelimit implements port.RateBuckets, token buckets by key: Local in one
// process's memory (the memory transport, where one process serves everything, and the
// sandbox marketplace), Redis in one Redis shared by every process (one script call per
// take, on the server's clock).
package ratelimit
