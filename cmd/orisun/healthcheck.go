package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/orisun-io/orisun"
)

// healthcheckCommand asks the node's /readyz and exits 0 when it answers
// 200, 1 otherwise. It is the container health check: the image is static
// and has no wget or curl.
func healthcheckCommand() *cobra.Command {
	var (
		addr    string
		timeout time.Duration
	)
	c := &cobra.Command{
		Use:   "healthcheck",
		Short: "exit 0 when the node is ready (GET /readyz answers 200), else 1",
		Long: `Asks the node's status listener for /readyz (--http, else $ORISUN_HTTP_ADDR,
else ` + orisun.HTTPAddrDefault + `) and exits 0 when it answers 200, 1 otherwise
(Docker's health check statuses). The Docker image runs it: it has no
shell, wget or curl.`,
		Example: `  orisun healthcheck --http 127.0.0.1:8990`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("http") {
				addr = httpAddrFromEnv()
			}
			return healthcheck(addr, timeout, cmd.OutOrStdout())
		},
	}
	c.Flags().StringVar(&addr, "http", "", "address of the node's status listener (default: $ORISUN_HTTP_ADDR, else "+orisun.HTTPAddrDefault+")")
	c.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "how long to wait for the answer")
	return c
}

func healthcheck(addr string, timeout time.Duration, stdout io.Writer) error {
	if listenerOff(addr) {
		return exit(exitFailure, fmt.Errorf("the status listener is off (%s): there is no /readyz to ask", offText(addr)))
	}
	url := strings.TrimSuffix(statusURL(addr), "/status") + "/readyz"
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return exit(exitFailure, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return exit(exitFailure, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	fmt.Fprintf(stdout, "%s %d %s\n", url, resp.StatusCode, strings.TrimSpace(string(body)))
	if resp.StatusCode != http.StatusOK {
		return exit(exitFailure, nil)
	}
	return nil
}
