package testserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Etcd is an etcd cluster started by StartEtcd or StartEtcdCluster.
type Etcd struct {
	// Endpoints are the client URLs of all members
	// ("http://127.0.0.1:PORT", "https://" with WithEtcdTLS), suitable for
	// clientv3.Config.Endpoints.
	Endpoints []string
	// Members are the cluster members, in the order of Endpoints.
	Members []*EtcdMember
	// TLS is set when the cluster was started WithEtcdTLS: its clients
	// must use TLS and present a certificate signed by TLS.CAFile.
	TLS *TLSFiles

	http *http.Client // for /health and Post
}

// EtcdOption configures StartEtcd and StartEtcdCluster.
type EtcdOption func(*etcdConfig)

type etcdConfig struct {
	tls  bool
	peer func(member int, addr string) (string, error)
}

// WithEtcdTLS serves the client URLs over TLS ("https://") with a server
// certificate for 127.0.0.1 from a fresh test CA, and requires clients to
// present a certificate from that CA (--client-cert-auth). Etcd.TLS names
// the CA and a client certificate. Peers still talk plain HTTP.
func WithEtcdTLS() EtcdOption { return func(c *etcdConfig) { c.tls = true } }

// WithEtcdPeerAddress makes f name the address that each member
// advertises to its peers (--initial-advertise-peer-urls): f is given the
// member's index and the address it listens on for its peers,
// "127.0.0.1:PORT", and returns that address or a proxy's address for it,
// so that a test can put a proxy on the links into a member. A member
// dials its peers at the addresses the others advertise, and every member
// the same ones: one proxy carries the links into its member from all the
// others (raft's streams from that member, which the others dial, and the
// messages the others post to it). f is called once per member at each
// start attempt (an attempt that fails is retried on new ports); Restart
// keeps the addresses.
func WithEtcdPeerAddress(f func(member int, addr string) (string, error)) EtcdOption {
	return func(c *etcdConfig) { c.peer = f }
}

// EtcdMember is one etcd server of an Etcd cluster.
type EtcdMember struct {
	// Name is the member name (--name), "m0", "m1", ...
	Name string
	// ClientURL is the client URL, "http://127.0.0.1:PORT" ("https://" with
	// WithEtcdTLS).
	ClientURL string
	// ClientAddr is the client address, "127.0.0.1:PORT".
	ClientAddr string
	// PeerURL is the peer URL the member advertises, which its peers dial,
	// "http://127.0.0.1:PORT": PeerListenURL, or the address
	// WithEtcdPeerAddress named for it.
	PeerURL string
	// PeerListenURL is the peer URL the member listens on.
	PeerListenURL string
	// Dir is the member's data directory (--data-dir); etcd.log is next to
	// it, in filepath.Dir(Dir).
	Dir string
	// Process is the member's process: Stop (SIGTERM), Kill, Pause,
	// Resume, Restart (same name, ports and data directory; it waits
	// until the member reports /health true, or, while the cluster has no
	// running quorum, until its client port accepts connections),
	// RestartAlone (until its client port accepts connections).
	*Process

	cluster *Etcd
}

// etcdHTTP is used for /health and the JSON gateway. Keep-alives are off so
// that no connection goroutines outlive a request.
var etcdHTTP = &http.Client{
	Timeout: 2 * time.Second,
	Transport: &http.Transport{
		Proxy:             nil,
		DisableKeepAlives: true,
		DialContext:       (&net.Dialer{Timeout: time.Second}).DialContext,
	},
}

// StartEtcd starts a single-node etcd and waits until it is healthy. It is
// stopped when the test ends.
func StartEtcd(t testing.TB, opts ...EtcdOption) *Etcd {
	t.Helper()
	return StartEtcdCluster(t, 1, opts...)
}

// StartEtcdCluster starts an n-node etcd cluster (static bootstrap with
// --initial-cluster) on free ports of 127.0.0.1 and waits until every member
// is healthy. Members use short raft timings (50ms heartbeat, 500ms election
// timeout) so that failover is fast. The cluster is stopped when the test
// ends.
func StartEtcdCluster(t testing.TB, n int, opts ...EtcdOption) *Etcd {
	t.Helper()
	if n < 1 {
		t.Fatalf("testserver: StartEtcdCluster: n = %d, want >= 1", n)
	}
	bin := Require(t, "etcd")
	var cfg etcdConfig
	for _, o := range opts {
		o(&cfg)
	}
	e := &Etcd{http: etcdHTTP}
	scheme := "http://"
	var tlsArgs []string
	if cfg.tls {
		files, err := writeTestPKI(t.TempDir())
		if err != nil {
			t.Fatalf("testserver: etcd TLS files: %v", err)
		}
		e.TLS = files
		if e.http, err = files.httpClient(); err != nil {
			t.Fatalf("testserver: etcd TLS client: %v", err)
		}
		scheme = "https://"
		tlsArgs = []string{"--cert-file", files.ServerCertFile, "--key-file", files.ServerKeyFile,
			"--client-cert-auth", "--trusted-ca-file", files.CAFile}
	}
	startWithRetry(t, fmt.Sprintf("etcd cluster of %d", n), func() ([]*Process, error) {
		ports, err := freePorts(2 * n)
		if err != nil {
			return nil, err
		}
		token := randomToken()
		e.Endpoints = make([]string, n)
		e.Members = make([]*EtcdMember, n)
		var initial []string
		for i := range n {
			peerAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2*i+1]))
			m := &EtcdMember{
				Name:          "m" + strconv.Itoa(i),
				ClientAddr:    net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2*i])),
				PeerListenURL: "http://" + peerAddr,
				cluster:       e,
			}
			m.PeerURL = m.PeerListenURL
			if cfg.peer != nil {
				advertised, err := cfg.peer(i, peerAddr)
				if err != nil {
					return nil, err
				}
				m.PeerURL = "http://" + advertised
			}
			m.ClientURL = scheme + m.ClientAddr
			e.Members[i] = m
			e.Endpoints[i] = m.ClientURL
			initial = append(initial, m.Name+"="+m.PeerURL)
		}
		procs := make([]*Process, n)
		for i, m := range e.Members {
			base := t.TempDir()
			m.Dir = filepath.Join(base, "data")
			m.Process = &Process{
				name: "etcd " + m.Name + " " + m.ClientAddr,
				path: bin,
				args: []string{
					"--name", m.Name,
					"--data-dir", m.Dir,
					"--listen-client-urls", m.ClientURL,
					"--advertise-client-urls", m.ClientURL,
					"--listen-peer-urls", m.PeerListenURL,
					"--initial-advertise-peer-urls", m.PeerURL,
					"--initial-cluster", strings.Join(initial, ","),
					"--initial-cluster-state", "new",
					"--initial-cluster-token", token,
					"--heartbeat-interval", "50",
					"--election-timeout", "500",
					"--logger", "zap",
					"--log-outputs", "stderr",
					"--log-level", "warn",
				},
				dir:          base,
				env:          etcdEnv(),
				logPath:      filepath.Join(base, "etcd.log"),
				stopSig:      syscall.SIGTERM,
				ready:        m.probe,
				alive:        m.listening,
				readyTimeout: startTimeout,
			}
			m.args = append(m.args, tlsArgs...)
			procs[i] = m.Process
		}
		for _, p := range procs {
			if err := p.launch(t); err != nil {
				return procs, err
			}
		}
		return procs, awaitAll(time.Now().Add(startTimeout), procs)
	})
	return e
}

func randomToken() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "testserver-" + hex.EncodeToString(b)
}

// etcdEnv is the environment for etcd and etcdctl: the caller's environment
// without ETCD_* / ETCDCTL_* variables, which would override flags.
func etcdEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "ETCD_") || strings.HasPrefix(kv, "ETCDCTL_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

func (e *Etcd) procs() []*Process {
	ps := make([]*Process, len(e.Members))
	for i, m := range e.Members {
		ps[i] = m.Process
	}
	return ps
}

// probe is the member's readiness probe: /health true, or, while the
// cluster has no running quorum (a member restarted after a full crash), a
// client port that accepts connections, as health needs a quorum.
func (m *EtcdMember) probe() error {
	if !quorum(m.cluster.procs()) {
		return tcpReady(m.ClientAddr)
	}
	return m.health()
}

// listening is the member's probe for RestartAlone: its client port
// accepts connections, whether or not the member can serve (cut off from
// its peers, it cannot).
func (m *EtcdMember) listening() error { return tcpReady(m.ClientAddr) }

// health checks GET /health on the member.
func (m *EtcdMember) health() error {
	resp, err := m.cluster.http.Get(m.ClientURL + "/health")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var h struct {
		Health string `json:"health"`
	}
	if err := json.Unmarshal(body, &h); err != nil || h.Health != "true" {
		return fmt.Errorf("%s: /health: %s %s", m.Name, resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

// jsonUint64 decodes a uint64 that the grpc-gateway encodes as a string.
type jsonUint64 uint64

func (u *jsonUint64) UnmarshalJSON(b []byte) error {
	v, err := strconv.ParseUint(strings.Trim(string(b), `"`), 10, 64)
	*u = jsonUint64(v)
	return err
}

type etcdStatus struct {
	Header struct {
		MemberID jsonUint64 `json:"member_id"`
	} `json:"header"`
	Leader   jsonUint64 `json:"leader"`
	RaftTerm jsonUint64 `json:"raftTerm"`
}

// Post sends a JSON request to the member's v3 grpc-gateway (etcd 3.4 serves
// it under /v3/, e.g. "/v3/kv/put" or "/v3/maintenance/status"), decodes the
// JSON response into out (if not nil) and returns an error for non-2xx
// replies. Byte fields such as keys and values are base64 in the JSON.
func (m *EtcdMember) Post(path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	resp, err := m.cluster.http.Post(m.ClientURL+path, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s: POST %s: %s: %s", m.Name, path, resp.Status, bytes.TrimSpace(rb))
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(rb, out)
}

func (m *EtcdMember) status() (*etcdStatus, error) {
	var st etcdStatus
	if err := m.Post("/v3/maintenance/status", struct{}{}, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// ID returns the member's raft ID as reported by the member itself.
func (m *EtcdMember) ID(t testing.TB) uint64 {
	t.Helper()
	st, err := m.status()
	if err != nil {
		t.Fatalf("testserver: etcd %s status: %v", m.Name, err)
	}
	return uint64(st.Header.MemberID)
}

// Leader waits until a running member reports itself as the raft leader and
// returns it. If several do (a stale leader after a pause), the one with the
// highest raft term wins. The test fails if there is no leader within the
// start timeout.
func (e *Etcd) Leader(t testing.TB) *EtcdMember {
	t.Helper()
	var leader *EtcdMember
	err := waitUntil(time.Now().Add(startTimeout), nil, func() error {
		var best *etcdStatus
		leader = nil
		for _, m := range e.Members {
			if !m.Running() {
				continue
			}
			st, err := m.status()
			if err != nil || st.Leader == 0 || st.Leader != st.Header.MemberID {
				continue
			}
			if best == nil || st.RaftTerm > best.RaftTerm {
				best, leader = st, m
			}
		}
		if leader == nil {
			return errors.New("no member reports itself as leader")
		}
		return nil
	})
	if err != nil {
		t.Fatal(startFailure("etcd leader", err, e.procs()))
	}
	return leader
}

// WaitHealthy waits until every running member reports /health true.
func (e *Etcd) WaitHealthy(t testing.TB) {
	t.Helper()
	err := waitUntil(time.Now().Add(startTimeout), nil, func() error {
		for _, m := range e.Members {
			if !m.Running() {
				continue
			}
			if err := m.health(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(startFailure("etcd health", err, e.procs()))
	}
}

// EtcdctlPath returns the path of etcdctl, skipping or failing the test (see
// Require) if it is not installed.
func EtcdctlPath(t testing.TB) string {
	t.Helper()
	return Require(t, "etcdctl")
}

// Ctl runs etcdctl (API v3) with --endpoints set to the cluster's endpoints
// and the given arguments, and returns its standard output. The test fails if
// etcdctl fails.
func (e *Etcd) Ctl(t testing.TB, args ...string) string {
	t.Helper()
	bin := EtcdctlPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	full := []string{"--endpoints", strings.Join(e.Endpoints, ","), "--dial-timeout", "2s", "--command-timeout", "10s"}
	if e.TLS != nil {
		full = append(full, "--cacert", e.TLS.CAFile, "--cert", e.TLS.ClientCertFile, "--key", e.TLS.ClientKeyFile)
	}
	full = append(full, args...)
	cmd := exec.CommandContext(ctx, bin, full...)
	cmd.Env = append(etcdEnv(), "ETCDCTL_API=3")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("testserver: etcdctl %s: %v\nstdout: %s\nstderr: %s", strings.Join(full, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}
