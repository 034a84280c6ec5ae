package redfish

import (
	"context"
	"net/http"
	"testing"

	"github.com/better-compute/better-compute/bmc/redfishsim"
	"github.com/better-compute/better-compute/proto"
)

// TestMediaWithoutID: a BMC whose virtual CD has no Id still has the medium named in an
// error, by its @odata.id, or said to have neither, so the operator can find it.
func TestMediaWithoutID(t *testing.T) {
	const cd = "/redfish/v1/Managers/1/VirtualMedia/CD1"
	actions := `"Actions":{"#VirtualMedia.InsertMedia":{"target":"` + cd + `/Actions/VirtualMedia.InsertMedia"}}`
	for body, want := range map[string]string{
		`{"@odata.id":"` + cd + `","MediaTypes":["CD"],` + actions + `}`: "insert media " + cd + ": HTTP 500",
		`{"MediaTypes":["CD"],` + actions + `}`:                          "insert media (no Id or @odata.id): HTTP 500",
	} {
		sim := newSim(t, redfishsim.Config{})
		d := open(t, config(t, sim))
		sim.Answer(cd, http.StatusOK, []byte(body))
		sim.AnswerRequest(http.MethodPost, cd+"/Actions/VirtualMedia.InsertMedia", http.StatusInternalServerError, []byte(`{}`))
		err := d.Insert(context.Background(), "https://images.example/boot.iso")
		checkErr(t, err, proto.DriverError, want)
	}
}
