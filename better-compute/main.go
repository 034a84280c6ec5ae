// Command better-compute is the registry (`serve`) and the operator's CLI.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/better-compute/better-compute/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], cli.Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv, Program: os.Args[0]})
	stop()
	os.Exit(code)
}
