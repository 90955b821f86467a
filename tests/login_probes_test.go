package tests

// Login probes against built `app` children (memStartAll, seedStartServe): what an attacker
// without an account can do to the login limits. Client addresses are loopback addresses
// 127.0.x.y (the service trusts the peer address only).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/postgres/pgtest"
	"github.com/listingkit/listing/internal/servicetest"
)

// probeLogin posts body to base's /v1/auth/login from ip and returns the status, the decoded
// answer and how long it took; err is the transport's.
func probeLogin(ctx context.Context, base, ip string, body []byte) (status int, out map[string]any, took time.Duration, err error) {
	return probeLoginID(ctx, base, ip, body, "")
}

// probeLoginID is probeLogin with X-Request-Id: requestID (unless empty).
func probeLoginID(ctx context.Context, base, ip string, body []byte, requestID string) (status int, out map[string]any, took time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/v1/auth/login", bytes.NewReader(body))
	if err != nil {
		return 0, nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if requestID != "" {
		req.Header.Set("X-Request-Id", requestID)
	}
	start := time.Now()
	resp, err := fromAddress(ip).Do(req)
	if err != nil {
		return 0, nil, time.Since(start), err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	took = time.Since(start)
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out, took, nil
}

func loginBody(email, password, device string) []byte {
	m := map[string]string{"email": email, "password": password}
	if device != "" {
		m["device_token"] = device
	}
	b, _ := json.Marshal(m)
	return b
}

// memRSS returns the child's current resident set (VmRSS) and its peak (VmHWM), in bytes.
func memRSS(t *testing.T, p *seedProc) (rss, peak int64) {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	require.NoError(t, err)
	for line := range strings.SplitSeq(string(raw), "\n") {
		for name, dst := range map[string]*int64{"VmRSS:": &rss, "VmHWM:": &peak} {
			if v, ok := strings.CutPrefix(line, name); ok {
				kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				require.NoError(t, err)
				*dst = kb << 10
			}
		}
	}
	require.Positive(t, rss)
	require.Positive(t, peak)
	return rss, peak
}

// TestLoginProbeHugeEmails: 200 logins with a 1 MB email, 20 from each of 10 addresses (the
// addresses in parallel), raise the child's resident memory, current and peak, by at most
// 32 MiB, and none is counted by the limiter.
func TestLoginProbeHugeEmails(t *testing.T) {
	t.Parallel()
	proc, env := memStartAll(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Warm-up: one ordinary failed login goes through every code path once.
	st, _, _, err := probeLogin(ctx, env.URL, "127.0.8.1", loginBody("nobody@example.com", "not the password", ""))
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, st)

	rssBefore, peakBefore := memRSS(t, proc)
	var refused, cut atomic.Int64
	var wg sync.WaitGroup
	for a := range 10 {
		wg.Go(func() {
			for i := range 20 {
				email := fmt.Sprintf("u%d_%s@example.com", a*20+i, strings.Repeat("x", 1_000_000))
				st, out, _, err := probeLogin(ctx, env.URL, fmt.Sprintf("127.0.8.%d", a+10), loginBody(email, "whatever password", ""))
				switch {
				case err != nil: // the service answered and closed before reading the body
					cut.Add(1)
				case st == http.StatusRequestEntityTooLarge:
					require.Equal(t, "BODY_TOO_LARGE", out["code"])
					refused.Add(1)
				default:
					t.Errorf("status %d %v", st, out)
				}
			}
		})
	}
	wg.Wait()
	rssAfter, peakAfter := memRSS(t, proc)
	t.Logf("200 logins with 1 MB emails: %d answered 413, %d cut by the service; VmRSS %d -> %d MiB, VmHWM %d -> %d MiB",
		refused.Load(), cut.Load(), rssBefore>>20, rssAfter>>20, peakBefore>>20, peakAfter>>20)
	require.Positive(t, refused.Load())
	require.LessOrEqual(t, rssAfter-rssBefore, int64(32<<20), "resident memory grew by %d MiB", (rssAfter-rssBefore)>>20)
	require.LessOrEqual(t, peakAfter-peakBefore, int64(32<<20), "peak resident memory grew by %d MiB", (peakAfter-peakBefore)>>20)
	require.Zero(t, env.Count(`SELECT count(*) FROM login_failures`)-1, "only the warm-up's failure is counted")
}

// TestLoginProbeOwnerDuringAttack: the owner mistypes once from address O, then logs in
// there; an attacker fails 16 times from 4 addresses, then keeps 60 fresh addresses cycling
// one failure each. Meanwhile the owner's correct password from O is answered 200 in 8 of 8
// tries, and so is a login from a new address that sends the device token O got.
//
// The bound: each try's time outside its own password check (the Login command: argon2id
// over 64 MiB, whose CPU time alone exceeds 1 s on a 2-core machine at load 20 or more) is
// under 1 s, read from the child's debug line "login steps" of the try; that is everything an
// attacker could make it wait on (the limits' transactions and the account's lock, a
// hashing slot, the records after the check). Each try runs beside a login, at the same
// moment, to an account nobody attacks, whose answer is logged for comparison.
// Not parallel: its bound is a latency, measured with the test binary's other children idle.
func TestLoginProbeOwnerDuringAttack(t *testing.T) {
	proc, env := memStartAllEnv(t, map[string]string{"LOG_LEVEL": "debug"})
	owner := env.Register("owner-under-attack@example.com")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const o = "127.0.9.1"
	st, _, _, err := probeLogin(ctx, env.URL, o, loginBody(owner.Email, "a mistyped password", ""))
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, st)
	st, out, _, err := probeLogin(ctx, env.URL, o, loginBody(owner.Email, owner.Password, ""))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, st, "%v", out)
	device, _ := out["device_token"].(string)
	require.Len(t, device, 43, "a successful login returns a device token: %v", out)
	for i := range 16 {
		st, _, _, err := probeLogin(ctx, env.URL, fmt.Sprintf("127.0.10.%d", i%4+1), loginBody(owner.Email, fmt.Sprintf("guess %d", i), ""))
		require.NoError(t, err)
		require.Contains(t, []int{http.StatusUnauthorized, http.StatusTooManyRequests}, st)
	}

	attack, stop := context.WithCancel(ctx)
	defer stop()
	var guesses, checked atomic.Int64
	var wg sync.WaitGroup
	for w := range 4 { // about 40 guesses a second, the account's turns always taken
		wg.Go(func() {
			for i := w; attack.Err() == nil; i += 4 {
				time.Sleep(100 * time.Millisecond)
				st, _, _, err := probeLogin(attack, env.URL, fmt.Sprintf("127.0.11.%d", i%60+1), loginBody(owner.Email, fmt.Sprintf("cycling %d", i), ""))
				if err == nil {
					guesses.Add(1)
					if st == http.StatusUnauthorized {
						checked.Add(1)
					}
				}
			}
		})
	}
	time.Sleep(time.Second) // the attack is running
	bystander := env.Register("bystander@example.com")
	type tried struct {
		ip, control string
		took        time.Duration
	}
	var tries []tried
	try := func(i int, ip, device string) {
		var wgb sync.WaitGroup
		var control string
		wgb.Go(func() { // a stranger's login, as the bystander's first from its address, may meet 503 SERVICE_BUSY
			st, _, took, err := probeLogin(ctx, env.URL, fmt.Sprintf("127.0.15.%d", i+1), loginBody(bystander.Email, bystander.Password, ""))
			control = fmt.Sprintf("%d in %v (%v)", st, took, err)
		})
		st, out, took, err := probeLoginID(ctx, env.URL, ip, loginBody(owner.Email, owner.Password, device), fmt.Sprintf("owner-try-%d", i))
		wgb.Wait()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, st, "try %d from %s: %v", i, ip, out)
		if device != "" {
			require.Equal(t, device, out["device_token"], "a known device keeps its token")
		}
		tries = append(tries, tried{ip: ip, took: took, control: control})
	}
	for i := range 8 {
		try(2*i, o, "")
		try(2*i+1, fmt.Sprintf("127.0.12.%d", i+1), device)
		time.Sleep(250 * time.Millisecond)
	}
	stop()
	wg.Wait()

	var slowest, slowestOutside time.Duration
	for i, tr := range tries {
		check := loginStep(t, proc, fmt.Sprintf("owner-try-%d", i), "check")
		outside := tr.took - check
		t.Logf("try %d from %s: %v, of which %v outside its password check (bystander %v)", i, tr.ip, tr.took, outside, tr.control)
		require.Less(t, outside, time.Second, "try %d waited %v beside its password check", i, outside)
		slowest, slowestOutside = max(slowest, tr.took), max(slowestOutside, outside)
	}
	t.Logf("owner: 16 of 16 logins answered 200, slowest %v, at most %v outside the password check; attacker: %d guesses during the tries, %d reached the password check",
		slowest, slowestOutside, guesses.Load(), checked.Load())
}

// loginStep returns the duration of step (limits, slot, check, record) in the child's debug
// line "login steps" of the request requestID.
func loginStep(t *testing.T, p *seedProc, requestID, step string) time.Duration {
	t.Helper()
	for line := range strings.SplitSeq(p.out.String(), "\n") {
		if !strings.Contains(line, `msg="login steps"`) || !strings.Contains(line, "request_id="+requestID+" ") {
			continue
		}
		for field := range strings.FieldsSeq(line) {
			if v, ok := strings.CutPrefix(field, step+"="); ok {
				d, err := time.ParseDuration(v)
				require.NoError(t, err, "%s", line)
				return d
			}
		}
	}
	require.FailNow(t, "no login steps logged", "request %s", requestID)
	return 0
}

// TestLoginProbeParallelGuesses: 60 guesses at once from 60 addresses against a fresh
// account reach at most 15 password checks (10 free failures, then turns 0, 0.25, 0.75, 1.75
// and 3.75 s later); every other guess is refused with 429, not queued. An admitted guess
// that finds no shared hashing slot in time is answered 503 and not checked.
func TestLoginProbeParallelGuesses(t *testing.T) {
	t.Parallel()
	_, env := memStartAll(t)
	victim := env.Register("parallel-victim@example.com")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var checked, limited, busy atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 60 {
		wg.Go(func() {
			<-start
			st, out, _, err := probeLogin(ctx, env.URL, fmt.Sprintf("127.0.13.%d", i+1), loginBody(victim.Email, fmt.Sprintf("parallel %d", i), ""))
			require.NoError(t, err)
			switch st {
			case http.StatusUnauthorized:
				checked.Add(1)
			case http.StatusTooManyRequests:
				require.Equal(t, "RATE_LIMITED", out["code"])
				limited.Add(1)
			case http.StatusServiceUnavailable: // admitted, but no shared hashing slot freed up in time: not checked
				require.Equal(t, "SERVICE_BUSY", out["code"])
				busy.Add(1)
			default:
				t.Errorf("status %d %v", st, out)
			}
		})
	}
	close(start)
	wg.Wait()
	t.Logf("60 parallel guesses from 60 addresses: %d reached the password check, %d refused (429), %d found no hashing slot (503)",
		checked.Load(), limited.Load(), busy.Load())
	require.LessOrEqual(t, checked.Load(), int64(15))
	require.Equal(t, int64(60), checked.Load()+limited.Load()+busy.Load())
}

// TestLoginProbeTwoServeProcessesShareTheLimits: two `serve` processes on one database hold
// one address to one budget of 5 failures per account, whichever process it talks to, and
// an IPv6 /64 or IPv4 address counts the same in both.
func TestLoginProbeTwoServeProcessesShareTheLimits(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	prefix := seedPrefix()
	seedRedis(t, prefix)
	_, a := seedStartServe(t, db.AppURL, prefix)
	_, b := seedStartServe(t, db.AppURL, prefix)
	acct := (&servicetest.Env{T: t, DB: db, URL: a}).Register("two-processes@example.com")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	checked := 0
	for i := range 10 {
		base := []string{a, b}[i%2]
		st, _, _, err := probeLogin(ctx, base, "127.0.14.1", loginBody(acct.Email, fmt.Sprintf("wrong %d", i), ""))
		require.NoError(t, err)
		if st == http.StatusUnauthorized {
			checked++
		} else {
			require.Equal(t, http.StatusTooManyRequests, st)
		}
	}
	require.Equal(t, 5, checked, "one budget across both processes")
	for _, base := range []string{a, b} {
		st, _, _, err := probeLogin(ctx, base, "127.0.14.1", loginBody(acct.Email, acct.Password, ""))
		require.NoError(t, err)
		require.Equal(t, http.StatusTooManyRequests, st, "the pair is refused by %s too", base)
	}
	st, _, _, err := probeLogin(ctx, b, "127.0.14.2", loginBody(acct.Email, acct.Password, ""))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, st, "another address is not held back")
}
