package redfish

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/better-compute/better-compute/bmc"
	"github.com/better-compute/better-compute/proto"
	"github.com/stmcginnis/gofish/schemas"
)

// fail turns what went wrong talking to the BMC into the project's error: TIMEOUT when
// ctx ran out, else DRIVER_ERROR with the BMC's own words, the login's password never
// among them (redacted).
func (d *driver) fail(ctx context.Context, op string, err error) error {
	if pe, ok := errors.AsType[*proto.Error](err); ok {
		return pe // the transport's refusal, which names the host and the path already
	}
	if bmc.Expired(ctx) {
		return proto.Errorf(proto.Timeout, "redfish %s: %s: %s", d.host, op, redacted(clip(err.Error()), d.password))
	}
	return proto.Errorf(proto.DriverError, "redfish %s: %s: %s", d.host, op, redacted(bmcMessage(err), d.password))
}

// redacted is text with every whole copy of secret replaced by "[redacted]", and the
// start of one the text was clipped in (four bytes or more of it: fewer tell next to
// nothing, and would take a clipped text's last letters that only look like it).
func redacted(text, secret string) string {
	if secret == "" {
		return text
	}
	text = strings.ReplaceAll(text, secret, "[redacted]")
	body, ellipsis := strings.CutSuffix(text, "...")
	for n := len(secret) - 1; n >= 4 && ellipsis; n-- {
		if strings.HasSuffix(body, secret[:n]) {
			return strings.TrimSuffix(body, secret[:n]) + "[redacted]..."
		}
	}
	return text
}

// bmcMessage is the text a BMC gave for a failure: its extended info messages (the
// human text of each Redfish message), else the error's own message, with the HTTP
// status. Errors of the transport (refused, TLS) keep their text. Whatever it is, it is
// clipped: a link the BMC named, or the JSON decoder's account of a body of another shape
// (which names the whole Go type it was read into), says what it has to say by then.
func bmcMessage(err error) string {
	if ce, ok := errors.AsType[*schemas.CollectionError](err); ok && len(ce.Failures) > 0 {
		link := slices.Sorted(maps.Keys(ce.Failures))[0]
		return clip(link + ": " + bmcMessage(ce.Failures[link]))
	}
	re, ok := errors.AsType[*schemas.Error](err)
	if !ok {
		return clip(err.Error())
	}
	var texts []string
	for _, info := range re.ExtendedInfos {
		if info.Message != "" {
			texts = append(texts, info.Message)
		}
	}
	if len(texts) == 0 && re.Message != "" {
		texts = append(texts, re.Message)
	}
	if len(texts) == 0 {
		texts = append(texts, http.StatusText(re.HTTPReturnedStatusCode))
	}
	text := clip(strings.Join(texts, "; "))
	if re.HTTPReturnedStatusCode == 0 {
		return text
	}
	return fmt.Sprintf("HTTP %d: %s", re.HTTPReturnedStatusCode, text)
}

// maxMessage bounds the BMC's text in an error: a BMC that answers an HTML page
// instead of a Redfish error has said what it has to say by then.
const maxMessage = 512

// listed is the values a BMC allows, as an error quotes them: joined, and clipped.
func listed[T ~string](values []T) string {
	names := make([]string, len(values))
	for i, v := range values {
		names[i] = string(v)
	}
	return clip(strings.Join(names, ", "))
}

// maxName bounds a name the BMC gave (an Id, a link) in an error, next to its text.
const maxName = 64

func clip(s string) string { return clipTo(s, maxMessage) }

func clipName(s string) string { return clipTo(s, maxName) }

// clipTo cuts s at n bytes, marking the cut.
func clipTo(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "..."
}
