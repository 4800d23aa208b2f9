package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/orisun-io/orisun"
)

// healthcheckCmd asks the node's /readyz and exits 0 when it answers 200,
// 1 otherwise. It is the container health check: the image is static and
// has no wget or curl.
func healthcheckCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("http", envOr("ORISUN_HTTP_ADDR", orisun.HTTPAddrDefault), "address of the node's status listener (ORISUN_HTTP_ADDR)")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if strings.EqualFold(*addr, "off") {
		fmt.Fprintln(stderr, "orisun healthcheck: the status listener is off (ORISUN_HTTP_ADDR=off)")
		return 1
	}
	url := strings.TrimSuffix(statusURL(*addr), "/status") + "/readyz"
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		fmt.Fprintf(stderr, "orisun healthcheck: %v\n", err)
		return 1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "orisun healthcheck: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	fmt.Fprintf(stdout, "%s %d %s\n", url, resp.StatusCode, strings.TrimSpace(string(body)))
	if resp.StatusCode != http.StatusOK {
		return 1
	}
	return 0
}
