// Command bcd is the agent: `bcd join` on a machine joining the registry, and the agent
// modes that run once it has joined.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/better-compute/better-compute/agent/bcdcli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := bcdcli.Run(ctx, os.Args[1:], bcdcli.Env{Stdout: os.Stdout, Stderr: os.Stderr})
	stop()
	os.Exit(code)
}
