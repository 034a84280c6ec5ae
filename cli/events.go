package cli

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
)

var eventCommands = []command{{
	path:    "nodes events",
	usage:   "ID [--workflow W] [--follow] [--cursor C] [--tenant T]",
	summary: "show a node's event log (state changes, workflow steps with durations, attestations, failures), 200 a page; --follow streams new events",
	nargs:   1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		tenant := tenantFlag(fs)
		workflow := fs.String("workflow", "", "only this workflow's events")
		follow := fs.Bool("follow", false, "print the whole log, then each new event as it is written, until interrupted (with --format json, one JSON object a line, an error too)")
		cursor := fs.String("cursor", "", "resume after a previous page")
		return func(x *exec) error {
			req := api.EventsRequest{TenantID: *tenant, NodeID: x.args[0], WorkflowID: *workflow, ListRequest: api.ListRequest{Cursor: *cursor}}
			if *follow {
				return x.followEvents(req)
			}
			var out api.EventList
			if err := x.call("metal.events", req, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, eventHeader)
				for _, e := range out.Events {
					eventLine(w, e)
				}
				nextPage(w, out.NextCursor)
			})
			return nil
		}
	},
}}

// eventHeader heads the table of events.
const eventHeader = "SEQ\tAT\tKIND\tWORKFLOW\tSTEP\tUSE\tCHANGE\tTOOK\tERROR"

// followEvents prints the node's events from req's cursor on, then waits for each new
// one, until the command's context ends: a table's header once, before the first; with
// --format json its error is a line too.
func (x *exec) followEvents(req api.EventsRequest) error {
	c, err := x.client()
	if err != nil {
		return streamError{err}
	}
	req.Wait = true
	header := x.format != "json"
	for x.ctx.Err() == nil {
		var out api.EventList
		if err := c.Call(x.ctx, "metal.events", req, &out); err != nil {
			if x.ctx.Err() != nil {
				return nil
			}
			return streamError{err}
		}
		printEvents(x.env.Stdout, x.format, out.Events, header)
		header = false
		if n := len(out.Events); n > 0 {
			req.AfterSeq, req.Cursor = out.Events[n-1].Seq, ""
		}
	}
	return nil
}

// printEvents writes events as table lines, after the table's header when header is set,
// or as JSON lines.
func printEvents(out io.Writer, format string, events []api.Event, header bool) {
	if format == "json" {
		enc := proto.NewEncoder(out)
		for _, e := range events {
			enc.Encode(e)
		}
		return
	}
	w := tabwriter.NewWriter(textWriter{out}, 0, 8, 2, ' ', 0)
	if header {
		fmt.Fprintln(w, eventHeader)
	}
	for _, e := range events {
		eventLine(w, e)
	}
	w.Flush()
}

// eventLine is one event of the table.
func eventLine(w io.Writer, e api.Event) {
	took := ""
	if e.DurationSeconds > 0 {
		took = e.Took().String()
	}
	fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Seq, e.At.Format(time.RFC3339), e.Kind, e.WorkflowID, e.Step, e.Use, e.ChangeText(), took, e.ErrorText())
}
