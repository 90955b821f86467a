package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/config"
	"github.com/listingkit/listing/internal/servicetest"
)

// fromAddress returns a client whose connections leave from the loopback address ip
// (127.0.0.0/8 is all loopback on Linux), as a client at another address would.
func fromAddress(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
}

// authCall posts body to an auth endpoint from ip and returns the status and the error code.
func authCall(t *testing.T, env *servicetest.Env, ip, path string, body map[string]string) (int, string, http.Header) {
	t.Helper()
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(context.Background(), "POST", env.URL+path, bytes.NewReader(raw))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := fromAddress(ip).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(out, &p)
	return resp.StatusCode, p.Code, resp.Header
}

// loginLimitsEnv starts the API with the default auth limits (20 requests a minute per
// client address; the login limits of docs/http-api.md).
// Eight password-hashing slots (six shared by unknown clients) keep a loaded machine's slow
// hashes from turning these limit tests' guesses into 503 SERVICE_BUSY.
func loginLimitsEnv(t *testing.T) *servicetest.Env {
	return servicetest.Start(t, func(c *config.Config) { c.AuthRatePerMinute = 20; c.PasswordHashConcurrency = 8 })
}

// TestLoginStrangersCannotLockTheOwnerOut: 19 wrong logins and one register of the victim's
// email, from 20 addresses at once (each checked or refused with 429, never queued), then the
// victim's correct password from an address that has not failed logs in (slowed down by at
// most the 4 s of a turn); after 60 more strangers' tries, a login from yet another address
// that sends the device token of the first logs in at once.
func TestLoginStrangersCannotLockTheOwnerOut(t *testing.T) {
	t.Parallel()
	env := loginLimitsEnv(t)
	victim := env.Register("victim@example.com")
	var strangers sync.WaitGroup
	for i := range 19 {
		strangers.Add(1)
		go func() {
			defer strangers.Done()
			st, code, _ := authCall(t, env, fmt.Sprintf("127.0.1.%d", i+1), "/v1/auth/login",
				map[string]string{"email": victim.Email, "password": fmt.Sprintf("wrong guess %02d", i)})
			require.Contains(t, []int{http.StatusUnauthorized, http.StatusTooManyRequests}, st, code)
		}()
	}
	strangers.Wait()
	st, code, _ := authCall(t, env, "127.0.1.20", "/v1/auth/register",
		map[string]string{"email": victim.Email, "password": "a stranger's password", "workspace_name": "x"})
	require.Equal(t, http.StatusConflict, st)
	require.Equal(t, "EMAIL_TAKEN", code)

	start := time.Now()
	resp := loginFrom(t, env, "127.0.1.30", map[string]string{"email": victim.Email, "password": victim.Password})
	require.Equal(t, http.StatusOK, resp.Status, "the owner's correct password from a fresh address: %s", resp.Body)
	require.Less(t, time.Since(start), 10*time.Second, "slowed down by at most the documented 4 s (plus hashing)")
	device, _ := resp.JSON(t)["device_token"].(string)
	require.NotEmpty(t, device)

	// Twenty more rounds of strangers: still the owner gets in, from a device that did.
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 3 {
				authCall(t, env, fmt.Sprintf("127.0.2.%d", i+1), "/v1/auth/login",
					map[string]string{"email": victim.Email, "password": fmt.Sprintf("guess %d-%d", i, j)})
			}
		}()
	}
	wg.Wait()
	start = time.Now()
	resp = loginFrom(t, env, "127.0.1.31", map[string]string{"email": victim.Email, "password": victim.Password, "device_token": device})
	require.Equal(t, http.StatusOK, resp.Status, "after 79 strangers' failures, with the device token: %s", resp.Body)
	require.Less(t, time.Since(start), 2*time.Second, "a known device is not slowed down")
}

// loginFrom posts body to /v1/auth/login from ip.
func loginFrom(t *testing.T, env *servicetest.Env, ip string, body map[string]string) servicetest.Response {
	t.Helper()
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(context.Background(), "POST", env.URL+"/v1/auth/login", bytes.NewReader(raw))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := fromAddress(ip).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return servicetest.Response{Status: resp.StatusCode, Body: out, Header: resp.Header}
}

// TestLoginIPv6PrefixIsOneAddress: the addresses of one IPv6 /64 share one budget per
// account (the request goes to the API's handler with the peer address set, as the server
// would set it); another /64 has its own.
func TestLoginIPv6PrefixIsOneAddress(t *testing.T) {
	t.Parallel()
	env := loginLimitsEnv(t)
	acct := env.Register("ipv6@example.com")
	login := func(remote, password string) int {
		raw, err := json.Marshal(map[string]string{"email": acct.Email, "password": password})
		require.NoError(t, err)
		req := httptest.NewRequest("POST", "/v1/auth/login", bytes.NewReader(raw))
		req.Header.Set("Content-Type", "application/json")
		req.RemoteAddr = remote
		rec := httptest.NewRecorder()
		env.API.Server.ServeHTTP(rec, req)
		return rec.Code
	}
	checked := 0
	for i := range 8 {
		if login(fmt.Sprintf("[2001:db8:5:6:%x::%x]:4000", i*997, i+1), fmt.Sprintf("wrong %d", i)) == http.StatusUnauthorized {
			checked++
		}
	}
	require.Equal(t, 5, checked, "eight addresses of one /64: one budget")
	require.Equal(t, http.StatusTooManyRequests, login("[2001:db8:5:6:ffff:ffff:ffff:ffff]:1", acct.Password))
	require.Equal(t, http.StatusOK, login("[2001:db8:5:7::1]:1", acct.Password), "the next /64 is another client")
}

// TestLoginBruteForceIsHeldToTheBudget: from one address, 5 wrong passwords per account in
// 15 minutes reach the password check, then 429 RATE_LIMITED with Retry-After; from twenty
// addresses, at most 5 each.
func TestLoginBruteForceIsHeldToTheBudget(t *testing.T) {
	t.Parallel()
	env := loginLimitsEnv(t)
	target := env.Register("target@example.com")

	checked, limited := 0, 0
	for i := range 15 {
		st, code, h := authCall(t, env, "127.0.3.1", "/v1/auth/login",
			map[string]string{"email": target.Email, "password": fmt.Sprintf("one address %02d", i)})
		switch st {
		case http.StatusUnauthorized:
			checked++
		case http.StatusTooManyRequests:
			require.Equal(t, "RATE_LIMITED", code)
			require.NotEmpty(t, h.Get("Retry-After"))
			limited++
		default:
			t.Fatalf("status %d %s", st, code)
		}
	}
	require.Equal(t, 5, checked, "password checks from one address")
	require.Equal(t, 10, limited)
	st, _, _ := authCall(t, env, "127.0.3.1", "/v1/auth/login", map[string]string{"email": target.Email, "password": target.Password})
	require.Equal(t, http.StatusTooManyRequests, st, "the pair that failed is refused, even the right password")

	// Twenty addresses, 10 tries each, all at once.
	var mu sync.Mutex
	perAddr := map[string]int{}
	var wg sync.WaitGroup
	for i := range 20 {
		ip := fmt.Sprintf("127.0.4.%d", i+1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 10 {
				st, code, _ := authCall(t, env, ip, "/v1/auth/login",
					map[string]string{"email": target.Email, "password": fmt.Sprintf("twenty %d %d", i, j)})
				require.Contains(t, []int{http.StatusUnauthorized, http.StatusTooManyRequests}, st, code)
				if st == http.StatusUnauthorized {
					mu.Lock()
					perAddr[ip]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	total := 0
	for ip, n := range perAddr {
		require.LessOrEqual(t, n, 5, ip)
		total += n
	}
	t.Logf("twenty addresses, 200 tries: %d reached the password check", total)
	require.LessOrEqual(t, total, 100)
}
