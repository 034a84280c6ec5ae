package redfishsim

import "net/http"

// writeError answers the way a BMC does: the status, and a Redfish error whose extended
// info carries the message registry's id and text.
func writeError(w http.ResponseWriter, status int, messageID, message string) {
	write(w, status, map[string]any{"error": map[string]any{
		"code":    "Base.1.8.GeneralError",
		"message": "A general error has occurred. See ExtendedInfo for more information.",
		"@Message.ExtendedInfo": []any{map[string]any{
			"@odata.type":     "#Message.v1_1_1.Message",
			"MessageId":       messageID,
			"Message":         message,
			"Severity":        "Warning",
			"MessageSeverity": "Warning",
			"Resolution":      "Correct the request and resubmit it.",
		}},
	}})
}
