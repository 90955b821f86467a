package bullmq

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestQueueNameWrapsOnlyWithQueueHashTags(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "listing-publish", Config{}.QueueName("listing-publish"))
	assert.Equal(t, "{listing-publish}", Config{QueueHashTags: true}.QueueName("listing-publish"))
	k := Config{QueueHashTags: true}.keys("q")
	assert.Equal(t, "bull:{q}:wait", k.wait)
	assert.Equal(t, "bull:{q}:j1:lock", k.lock("j1"))
	assert.Equal(t, "bull:{q}:de:j1", k.dedup("j1"))
	assert.Equal(t, "p:q:", Config{Prefix: "p"}.keys("q").base)
}

func TestClusterSafe(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		prefix string
		tags   bool
		safe   bool
	}{
		{"bull", false, false},
		{"bull", true, true},
		{"{bull}", false, true},
		{"{bull}", true, true},
		{"app{x}", false, true},
		{"{}", false, false},  // an empty tag: Redis hashes the whole key
		{"{}", true, false},   // the empty tag comes first and wins
		{"a{b", false, false}, // the tag would close in the job id or suffix
		{"a}b", true, true},   // a lone "}" before the first "{" is ignored
		{"", false, false},    // the default prefix, untagged
		{"", true, true},
	} {
		err := Config{Prefix: tc.prefix, QueueHashTags: tc.tags}.ClusterSafe()
		if tc.safe {
			assert.NoError(t, err, "prefix %q tags %v", tc.prefix, tc.tags)
		} else {
			assert.Error(t, err, "prefix %q tags %v", tc.prefix, tc.tags)
		}
	}
}

// A cluster client makes Validate (and so every constructor) require ClusterSafe; a
// single-node client does not.
func TestValidateRequiresClusterSafeOnClusterClient(t *testing.T) {
	t.Parallel()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { _ = cc.Close() })
	cfg := Config{Client: cc, Prefix: "bull"}
	cfg.setDefaults()
	require.ErrorContains(t, cfg.Validate(), "hash tag")
	_, err := NewPublisher(PublisherConfig{Config: Config{Client: cc}}, nil)
	require.ErrorContains(t, err, "hash tag")
	cfg.QueueHashTags = true
	require.NoError(t, cfg.Validate())

	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = c.Close() })
	cfg = Config{Client: c}
	cfg.setDefaults()
	require.NoError(t, cfg.Validate())
}
