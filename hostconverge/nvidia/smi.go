package nvidia

import (
	"context"
	"strings"

	"github.com/better-compute/better-compute/hostconverge/hostenv"
	"github.com/better-compute/better-compute/proto"
)

// queryGPUs runs the nvidia-smi --query-gpu query and returns its answer as ParseCSV
// reads it, a row of columns fields per GPU; an answer that does not read so, or that
// names no GPU, is DRIVER_ERROR naming what the query is for.
func queryGPUs(ctx context.Context, p *hostenv.Pass, query []string, columns int, what string) ([][]string, error) {
	out, err := p.Run(ctx, "nvidia-smi", query...)
	if err != nil {
		return nil, err
	}
	rows, ok := ParseCSV(string(out), columns)
	if !ok || len(rows) == 0 {
		return nil, proto.Errorf(proto.DriverError, "nvidia-smi answered the %s query with %q", what, firstLine(out))
	}
	return rows, nil
}

// ParseCSV reads the output of an nvidia-smi --query-gpu=... --format=csv,noheader
// query: one row per line, fields separated by commas, trimmed. Rows that do not have
// exactly columns fields are an error, reported by row.
func ParseCSV(out string, columns int) ([][]string, bool) {
	var rows [][]string
	for line := range strings.SplitSeq(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		fields := strings.Split(line, ",")
		if len(fields) != columns {
			return nil, false
		}
		for i := range fields {
			fields[i] = strings.TrimSpace(fields[i])
		}
		rows = append(rows, fields)
	}
	return rows, true
}

// notAvailable reports a field nvidia-smi answers for a GPU without the feature.
func notAvailable(field string) bool {
	return field == "[N/A]" || field == "N/A" || field == "[Not Supported]"
}
