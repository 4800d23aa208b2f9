package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/client"
	"github.com/orisun-io/orisun/status"
)

// waitFlag is --wait-settled, with an optional timeout: bare, it waits the
// default; --wait-settled=30s waits 30 seconds.
type waitFlag struct {
	on      bool
	timeout time.Duration
}

func (w *waitFlag) String() string {
	if w == nil || !w.on {
		return ""
	}
	return w.timeout.String()
}

func (w *waitFlag) Set(s string) error {
	switch s {
	case "true":
		w.on = true
		return nil
	case "false":
		w.on = false
		return nil
	}
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return fmt.Errorf("%q has no unit: give one, e.g. %ss or %sm", s, s, s)
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return fmt.Errorf("%q is not a timeout (e.g. 30s, 2m)", s)
	}
	w.on, w.timeout = true, d
	return nil
}

// Type names the flag's value in help.
func (w *waitFlag) Type() string { return "timeout" }

// Exit codes of orisun status (exitText lists them with the others').
const (
	exitNotSettled = exitFailure     // --wait-settled: the timeout passed first
	exitUnreadable = exitUnavailable // the status could not be read at all
)

// statusCommand is `orisun status`: the status of a running node, from its
// HTTP listener (or over NATS with --server), for people (a table) or
// scripts (--json, --wait-settled).
func statusCommand() *cobra.Command {
	var (
		addr, server string
		asJSON       bool
		creds        credFlags
	)
	wait := &waitFlag{timeout: time.Minute}
	c := &cobra.Command{
		Use:   "status",
		Short: "print a node's status: per boundary its head, what is published, the lag and why",
		Long: `Prints the status of a running orisun node: per boundary its head, what is
published, the lag, the publisher's state and why (docs/operations.md).
It reads the node's status listener (--http, else $ORISUN_HTTP_ADDR, else
` + orisun.HTTPAddrDefault + `), or the status over NATS with -s/--server.

Exit status: 0 when the status was read (with --wait-settled: once settled);
1 with --wait-settled when the timeout passed first (the reason is printed);
2 for bad flags; 3 when the status could not be read at all.`,
		Example: `  orisun status
  orisun status --json
  orisun status --wait-settled 2m      # exit 0 once every committed event is published
  orisun status -s nats://127.0.0.1:4222`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("http") {
				addr = httpAddrFromEnv()
			}
			stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
			r, err := newStatusReader(server, addr, &creds)
			if err != nil {
				return err
			}
			defer r.close()
			if !wait.on {
				return r.printOnce(asJSON, stdout)
			}
			return r.waitSettled(wait.timeout, asJSON, stdout, stderr)
		},
	}
	fs := c.Flags()
	fs.SortFlags = false // the command's own flags first, as added
	fs.StringVar(&addr, "http", "", "address of the node's status listener (default: $ORISUN_HTTP_ADDR, else "+orisun.HTTPAddrDefault+")")
	fs.StringVarP(&server, "server", "s", "", "read the status over NATS from this URL instead (the orisun.api.status endpoint)")
	fs.BoolVar(&asJSON, "json", false, "print the status document as JSON")
	fs.Var(wait, "wait-settled", "wait until every boundary's published position equals its head, at most this long")
	fs.Lookup("wait-settled").NoOptDefVal = "1m"
	addCredFlags(fs, &creds)
	return c
}

// statusReader reads a node's status over NATS (c) or from its status
// listener (url).
type statusReader struct {
	c   *client.Client
	hc  *http.Client
	url string
}

// newStatusReader connects to the NATS URL server, or, without one, reads
// the listener at addr.
func newStatusReader(server, addr string, creds *credFlags) (*statusReader, error) {
	if server != "" {
		copts, err := creds.options()
		if err != nil {
			return nil, exit(exitUsage, err)
		}
		c, err := client.Connect(server, append(copts, client.Name("orisun-status"), client.Timeout(requestTimeout))...)
		if err != nil {
			// Any failure to connect leaves the status unread (exit 3).
			_, msg := connectProblem(server, err)
			return nil, exit(exitUnreadable, msg)
		}
		return &statusReader{c: c}, nil
	}
	if listenerOff(addr) {
		return nil, usageErr("the status listener is off (%s); give --http host:port, or -s/--server to read the status over NATS", offText(addr))
	}
	return &statusReader{hc: &http.Client{}, url: statusURL(addr)}, nil
}

func (r *statusReader) read(ctx context.Context) (orisun.Status, error) {
	if r.c != nil {
		return r.c.Status(ctx)
	}
	return fetchStatus(ctx, r.hc, r.url)
}

func (r *statusReader) close() {
	if r.c != nil {
		r.c.Close()
	}
}

// printOnce reads the status once and prints it.
func (r *statusReader) printOnce(asJSON bool, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	st, err := r.read(ctx)
	if err != nil {
		return exit(exitUnreadable, err)
	}
	printStatus(stdout, st, asJSON)
	return nil
}

// waitSettled reads the status until it is settled or timeout passes, and
// prints the last one read; when it never settled it says why.
func (r *statusReader) waitSettled(timeout time.Duration, asJSON bool, stdout, stderr io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var (
		st      orisun.Status
		lastErr error
		read    bool
	)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		// Each request is bounded by what is left of the wait.
		rctx, rcancel := context.WithTimeout(ctx, requestTimeout)
		cur, err := r.read(rctx)
		rcancel()
		if err == nil {
			st, read, lastErr = cur, true, nil
			if st.Settled {
				printStatus(stdout, st, asJSON)
				return nil
			}
		} else if ctx.Err() == nil || !read {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			if !read {
				return exit(exitUnreadable, fmt.Errorf("could not read the status within %s: %v", timeout, lastErr))
			}
			fmt.Fprintf(stderr, "orisun status: not settled after %s: %s\n", timeout, unsettledReason(st, lastErr))
			printStatus(stdout, st, asJSON)
			return exit(exitNotSettled, nil)
		case <-tick.C:
		}
	}
}

// httpAddrFromEnv is the status listener's address as orisun serve reads
// it: ORISUN_HTTP_ADDR when set, empty too (no listener), else the
// default.
func httpAddrFromEnv() string {
	if v, ok := os.LookupEnv("ORISUN_HTTP_ADDR"); ok {
		return v
	}
	return orisun.HTTPAddrDefault
}

// listenerOff reports whether addr turns the status listener off, as
// orisun serve reads it (orisun.Config.HTTPEnabled).
func listenerOff(addr string) bool { return addr == "" || strings.EqualFold(addr, "off") }

// offText says how addr turned the listener off.
func offText(addr string) string {
	if addr == "" {
		return "the address is empty, as ORISUN_HTTP_ADDR= sets it"
	}
	return "ORISUN_HTTP_ADDR=" + addr
}

// statusURL turns host:port (or a URL) into the /status URL.
func statusURL(addr string) string {
	if !strings.Contains(addr, "://") {
		if strings.HasPrefix(addr, ":") {
			addr = "127.0.0.1" + addr
		}
		addr = "http://" + addr
	}
	return strings.TrimSuffix(addr, "/") + "/status"
}

func fetchStatus(ctx context.Context, c *http.Client, url string) (orisun.Status, error) {
	var st orisun.Status
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return st, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return st, fmt.Errorf("read %s: %w (is orisun running, with ORISUN_HTTP_ADDR on this address?)", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return st, fmt.Errorf("read %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return st, fmt.Errorf("%s: not a status document: %w", url, err)
	}
	return st, nil
}

// unsettledReason says why a status is not settled, boundary by boundary;
// err is the last failure to read it, if the last attempt failed.
func unsettledReason(st orisun.Status, err error) string {
	var parts []string
	if err != nil {
		parts = append(parts, "the last attempt to read the status failed: "+err.Error())
	}
	if !st.Store.OK {
		parts = append(parts, "store failing: "+st.Store.Error)
	}
	if !st.NATS.OK {
		parts = append(parts, "NATS unreachable: "+st.NATS.Error)
	}
	for _, b := range st.Boundaries {
		switch {
		case b.Error != "":
			parts = append(parts, fmt.Sprintf("boundary %s: %s", b.Name, b.Error))
		case b.Published != b.Head:
			parts = append(parts, fmt.Sprintf("boundary %s: published %d of head %d (%d behind, oldest %.1fs old); publisher on this node %s: %s",
				b.Name, b.Published, b.Head, b.LagEvents, b.LagSeconds, b.State, b.Reason))
		}
		if b.Staged > 0 {
			parts = append(parts, fmt.Sprintf("boundary %s: %s", b.Name, stagedText(b)))
		}
	}
	if len(parts) == 0 {
		return "unknown"
	}
	return strings.Join(parts, "; ")
}

func printStatus(w io.Writer, st orisun.Status, asJSON bool) {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(st)
		return
	}
	settled := "no"
	if st.Settled {
		settled = "yes"
	}
	fmt.Fprintf(w, "node %s (%s), version %s, at %s\n", st.NodeID, st.LeaseHolder, st.Version, st.Time.Format(time.RFC3339))
	fmt.Fprintf(w, "store: %s   nats: %s   settled: %s\n", healthText(st.Store), healthText(st.NATS), settled)
	if p := st.Placement; p != nil {
		fmt.Fprintf(w, "placement: %d live nodes, fair share %d, leading %d\n", p.LiveNodes, p.FairShare, p.Leading)
	}
	if st.Warning != "" {
		fmt.Fprintf(w, "WARNING: %s\n", st.Warning)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BOUNDARY\tSTATE\tFOR\tHEAD\tPUBLISHED\tLAG\tLAG AGE\tSTREAM\tLEASE\tREASON")
	for _, b := range st.Boundaries {
		stream := "-"
		switch {
		case b.StreamError != "":
			stream = "?"
		case b.StreamMsgs > 0:
			stream = fmt.Sprintf("%d..%d", b.StreamFirst, b.StreamLast)
		case b.StreamLast > 0:
			stream = fmt.Sprintf("empty, next %d", b.StreamLast+1)
		}
		lease := "-"
		if b.LeaseHolder != "" {
			lease = fmt.Sprintf("%s (term %d)", b.LeaseHolder, b.LeaseTerm)
			// The expiry is in the store's clock, the time in the node's:
			// good enough to flag a lease nobody renews.
			if !b.LeaseExpires.IsZero() && b.LeaseExpires.Before(st.Time) {
				lease += " expired"
			}
		}
		reason := b.Reason
		if b.Error != "" {
			reason += " [" + b.Error + "]"
		}
		if b.StreamError != "" {
			reason += " [stream " + b.StreamError + "]"
		}
		if b.Warning != "" {
			reason += " [warning: " + b.Warning + "]"
		}
		if b.Staged > 0 || b.MoveError != "" {
			reason += " [" + stagedText(b) + "]"
		}
		if b.SetAside > 0 {
			reason += fmt.Sprintf(" [%d enqueued events set aside, the latest: %s]", b.SetAside, b.SetAsideReason)
		}
		since := "-"
		if !b.Since.IsZero() {
			since = st.Time.Sub(b.Since).Round(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%.1fs\t%s\t%s\t%s\n",
			b.Name, b.State, since, b.Head, b.Published, b.LagEvents, b.LagSeconds, stream, lease, reason)
	}
	_ = tw.Flush()
}

// stagedText says what waits in a boundary's staging (docs/outbox.md): the
// committed enqueued events not yet moved into the log, the age of the
// oldest (from its enqueue call), and the mover's error while its moves
// fail.
func stagedText(b status.BoundaryStatus) string {
	t := fmt.Sprintf("%d enqueued events staged, not yet moved into the log (the oldest enqueued %.1fs ago)", b.Staged, b.StagedSeconds)
	if b.Staged == 0 {
		t = "nothing staged"
	}
	if b.MoveError != "" {
		t += "; the mover fails: " + b.MoveError
	}
	return t
}

func healthText(h status.Health) string {
	if h.OK {
		return h.Kind + " ok"
	}
	return h.Kind + " FAILING: " + h.Error
}
