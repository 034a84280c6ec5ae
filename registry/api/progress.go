package api

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/better-compute/better-compute/proto"
)

// What a client shows of a step's progress: the CLI's lines and the console's pages alike.

// ProgressText shows progress detail: bytes written as such, anything else as JSON.
func ProgressText(raw json.RawMessage) string {
	if text, ok := wipeProgressText(raw); ok {
		return text
	}
	var p struct {
		BytesWritten *int64 `json:"bytesWritten"`
		SizeBytes    int64  `json:"sizeBytes"`
		Read         *int64 `json:"read"`
	}
	if json.Unmarshal(raw, &p) != nil || p.BytesWritten == nil {
		return string(raw)
	}
	if p.Read != nil && p.SizeBytes > 0 {
		return fmt.Sprintf("%s of %s read, %s written", BytesText(*p.Read), BytesText(p.SizeBytes), BytesText(*p.BytesWritten))
	}
	if p.SizeBytes > 0 {
		return fmt.Sprintf("%s of %s written", BytesText(*p.BytesWritten), BytesText(p.SizeBytes))
	}
	return BytesText(*p.BytesWritten) + " written"
}

func BytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// wipeProgressText shows disk.wipe's progress: the percent done of each disk.
func wipeProgressText(raw json.RawMessage) (string, bool) {
	var p proto.WipeProgress
	if json.Unmarshal(raw, &p) != nil || p.Percent == nil {
		return "", false
	}
	names := make([]string, 0, len(p.Percent))
	for n := range p.Percent {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %d%%", n, p.Percent[n])
	}
	return p.Mode + ": " + strings.Join(parts, ", "), true
}
