package nvidia

import (
	"strings"
)

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
