package redfish

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/better-compute/better-compute/bmc"
	"github.com/better-compute/better-compute/bmc/redfish/redfishtest"
	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

// The tests in this file drive the driver against OpenStack's Redfish emulator,
// sushy-tools (package redfishtest): a Redfish service written by others, with the
// quirks docs/bmc.md lists under "Real BMCs and their quirks".

// sushyLogin is the emulator's login, attached as the site attaches a command's.
var sushyLogin = bmc.Attached{Ref: credentialRef, Credential: bmc.NewCredential(redfishtest.Username, redfishtest.Password)}

// sushyConfig binds the emulator, trusted by its key's pin, with the default
// authentication. The emulator lands a power change 1 to 11 seconds after the reset.
func sushyConfig(t *testing.T, e *redfishtest.Emulator) bmc.Config {
	t.Helper()
	return pinned(t, e.Address, e.Certificate.PublicKey, "100ms", "40s")
}

func openSushy(t *testing.T, cfg bmc.Config) bmc.Driver {
	t.Helper()
	return openAs(t, cfg, sushyLogin)
}

// resets counts the emulator's ComputerSystem.Reset requests.
func resets(t *testing.T, e *redfishtest.Emulator) int {
	t.Helper()
	n := 0
	for _, r := range e.Requests(t) {
		if strings.HasPrefix(r, "POST ") && strings.Contains(r, "/Actions/ComputerSystem.Reset ") {
			n++
		}
	}
	return n
}

// TestSushyLogin: the emulator has no Redfish sessions; by default the driver sees that
// in the service root and authenticates by basic authentication, never trying to open a
// session or deleting one. Option auth session asks for what the BMC lacks: INVALID_CONFIG. A wrong
// password is the BMC's 401, without the password in the message.
func TestSushyLogin(t *testing.T) {
	e := redfishtest.Start(t, redfishtest.Config{})
	t.Run("default", func(t *testing.T) {
		d := openSushy(t, sushyConfig(t, e))
		if got, err := d.GetPower(context.Background()); err != nil || got != proto.PowerStateOff {
			t.Fatalf("power %s, %v; want off", got, err)
		}
		d.Close()
		for _, r := range e.Requests(t) {
			if !strings.HasPrefix(r, "GET ") {
				t.Errorf("the driver sent %s", r)
			}
		}
	})
	t.Run("basic", func(t *testing.T) {
		cfg := sushyConfig(t, e)
		cfg.Options[optAuth] = "basic"
		openSushy(t, cfg)
	})
	t.Run("session", func(t *testing.T) {
		cfg := sushyConfig(t, e)
		cfg.Options[optAuth] = "session"
		_, err := Open(context.Background(), cfg, bmc.Env{Credentials: sushyLogin})
		checkErr(t, err, proto.InvalidConfig, "offers no Redfish sessions")
		if got := proto.AsError(err).Details.Path; got != "options.auth" {
			t.Fatalf("path %q, want options.auth", got)
		}
	})
	t.Run("wrong password", func(t *testing.T) {
		wrong := bmc.Attached{Ref: credentialRef, Credential: bmc.NewCredential(redfishtest.Username, "guess-Pa55")}
		_, err := Open(context.Background(), sushyConfig(t, e), bmc.Env{Credentials: wrong})
		checkErr(t, err, proto.DriverError, "list systems: /redfish/v1/Systems: HTTP 401: Incorrect username or password")
		if strings.Contains(err.Error(), "guess-Pa55") {
			t.Fatalf("the error shows the password: %v", err)
		}
	})
}

// TestSushyPower: every power action against the emulator, which offers no PowerCycle
// (a cycle is ForceOff, then On), lists Nmi but refuses it, and lands each change
// seconds after accepting the reset.
func TestSushyPower(t *testing.T) {
	cases := map[string]struct {
		initial string
		action  proto.PowerAction
		resets  int
		state   string
		code    proto.Code
		message string
	}{
		"on":                       {initial: "Off", action: proto.PowerActionOn, resets: 1, state: "On"},
		"on when on":               {initial: "On", action: proto.PowerActionOn, state: "On"},
		"off":                      {initial: "On", action: proto.PowerActionOff, resets: 1, state: "Off"},
		"off when off":             {initial: "Off", action: proto.PowerActionOff, state: "Off"},
		"graceful-off":             {initial: "On", action: proto.PowerActionGracefulOff, resets: 1, state: "Off"},
		"reset":                    {initial: "On", action: proto.PowerActionReset, resets: 1, state: "On"},
		"reset when off powers on": {initial: "Off", action: proto.PowerActionReset, resets: 1, state: "On"},
		"graceful-restart":         {initial: "On", action: proto.PowerActionGracefulRestart, resets: 1, state: "On"},
		"cycle without PowerCycle": {initial: "On", action: proto.PowerActionCycle, resets: 2, state: "On"},
		"cycle when off powers on": {initial: "Off", action: proto.PowerActionCycle, resets: 1, state: "On"},
		"nmi listed but refused":   {initial: "On", action: proto.PowerActionNMI, resets: 1, state: "On", code: proto.DriverError, message: "reset Nmi: HTTP 501: Power state Nmi is not supported"},
		"unknown action":           {initial: "Off", action: "hibernate", state: "Off", code: proto.InvalidConfig, message: `power action "hibernate"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := redfishtest.Start(t, redfishtest.Config{PowerState: tc.initial})
			d := openSushy(t, sushyConfig(t, e))
			checkErr(t, d.SetPower(context.Background(), tc.action), tc.code, tc.message)
			if got := resets(t, e); got != tc.resets {
				t.Errorf("%d resets, want %d", got, tc.resets)
			}
			if got := e.System(t).PowerState; got != tc.state {
				t.Errorf("power state %s, want %s", got, tc.state)
			}
			want := map[string]proto.PowerState{"On": proto.PowerStateOn, "Off": proto.PowerStateOff}[tc.state]
			if got, err := d.GetPower(context.Background()); err != nil || got != want {
				t.Errorf("GetPower %s, %v; want %s", got, err, want)
			}
		})
	}
}

// TestSushyBootOverride: the emulator keeps every override (a one-time one reads back
// Continuous) and records a UEFI HTTP boot without a URL as Pxe; the driver takes both.
// Legacy mode takes UefiHttp out of the targets it allows: UNSUPPORTED.
func TestSushyBootOverride(t *testing.T) {
	cases := map[string]struct {
		bootMode   string
		device     proto.BootDevice
		persistent bool
		want       redfishtest.Boot
		code       proto.Code
		message    string
	}{
		"pxe once":        {device: proto.BootDevicePXE, want: redfishtest.Boot{BootSourceOverrideTarget: "Pxe", BootSourceOverrideEnabled: "Continuous", BootSourceOverrideMode: "UEFI"}},
		"pxe persistent":  {device: proto.BootDevicePXE, persistent: true, want: redfishtest.Boot{BootSourceOverrideTarget: "Pxe", BootSourceOverrideEnabled: "Continuous", BootSourceOverrideMode: "UEFI"}},
		"disk persistent": {device: proto.BootDeviceDisk, persistent: true, want: redfishtest.Boot{BootSourceOverrideTarget: "Hdd", BootSourceOverrideEnabled: "Continuous", BootSourceOverrideMode: "UEFI"}},
		"cd once":         {device: proto.BootDeviceCD, want: redfishtest.Boot{BootSourceOverrideTarget: "Cd", BootSourceOverrideEnabled: "Continuous", BootSourceOverrideMode: "UEFI"}},
		"http is pxe":     {device: proto.BootDeviceHTTP, want: redfishtest.Boot{BootSourceOverrideTarget: "Pxe", BootSourceOverrideEnabled: "Continuous", BootSourceOverrideMode: "UEFI"}},
		"option bootMode": {bootMode: "legacy", device: proto.BootDeviceDisk, want: redfishtest.Boot{BootSourceOverrideTarget: "Hdd", BootSourceOverrideEnabled: "Continuous", BootSourceOverrideMode: "Legacy"}},
		"unknown device":  {device: "floppy", want: redfishtest.Boot{BootSourceOverrideTarget: "Hdd", BootSourceOverrideEnabled: "Continuous", BootSourceOverrideMode: "UEFI"}, code: proto.InvalidConfig, message: `boot device "floppy"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := redfishtest.Start(t, redfishtest.Config{})
			cfg := sushyConfig(t, e)
			if tc.bootMode != "" {
				cfg.Options[optBootMode] = tc.bootMode
			}
			d := openSushy(t, cfg)
			checkErr(t, d.SetBootDevice(context.Background(), tc.device, tc.persistent), tc.code, tc.message)
			if diff := cmp.Diff(tc.want, e.System(t).Boot); diff != "" {
				t.Errorf("boot override (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("http in legacy mode", func(t *testing.T) {
		t.Parallel()
		e := redfishtest.Start(t, redfishtest.Config{})
		cfg := sushyConfig(t, e)
		cfg.Options[optBootMode] = "legacy"
		d := openSushy(t, cfg)
		ctx := context.Background()
		checkErr(t, d.SetBootDevice(ctx, proto.BootDevicePXE, true), "", "")
		checkErr(t, d.SetBootDevice(ctx, proto.BootDeviceHTTP, false), proto.Unsupported, "offers no boot override target UefiHttp, only Pxe, Cd, Hdd")
		want := redfishtest.Boot{BootSourceOverrideTarget: "Pxe", BootSourceOverrideEnabled: "Continuous", BootSourceOverrideMode: "Legacy"}
		if diff := cmp.Diff(want, e.System(t).Boot); diff != "" {
			t.Errorf("boot override (-want +got):\n%s", diff)
		}
	})
}

// images is a loopback HTTP server of ISO images, recording what it served: the
// emulator downloads an image when it is inserted.
type images struct {
	*httptest.Server
	mu     sync.Mutex
	served []string
}

func newImages(t *testing.T) *images {
	im := &images{}
	im.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		im.mu.Lock()
		im.served = append(im.served, r.URL.Path)
		im.mu.Unlock()
		if !strings.HasSuffix(r.URL.Path, ".iso") {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte("CD001 " + r.URL.Path))
	}))
	t.Cleanup(im.Close)
	return im
}

func (im *images) Served() []string {
	im.mu.Lock()
	defer im.mu.Unlock()
	return slices.Clone(im.served)
}

// cdState is the emulator's virtual CD.
type cdState struct {
	Image          string
	Inserted       bool
	WriteProtected bool
}

// TestSushyVirtualMedia: insert and eject through the emulator's virtual CD, which its
// manager links under the system's path; the emulator downloads each image from the
// loopback server, and a download that fails is the BMC's refusal.
func TestSushyVirtualMedia(t *testing.T) {
	// A step acts on the virtual CD; url is the image server's.
	type step func(ctx context.Context, d bmc.Driver, url string) error
	insert := func(path string) step {
		return func(ctx context.Context, d bmc.Driver, url string) error { return d.Insert(ctx, url+path) }
	}
	eject := func(ctx context.Context, d bmc.Driver, _ string) error { return d.Eject(ctx) }
	cases := map[string]struct {
		noMedia bool
		// steps run in turn until one fails.
		steps   []step
		want    cdState
		served  []string
		code    proto.Code
		message string
	}{
		"insert":           {steps: []step{insert("/a.iso")}, want: cdState{Image: "/a.iso", Inserted: true, WriteProtected: true}, served: []string{"/a.iso"}},
		"insert twice":     {steps: []step{insert("/a.iso"), insert("/a.iso")}, want: cdState{Image: "/a.iso", Inserted: true, WriteProtected: true}, served: []string{"/a.iso"}},
		"insert replaces":  {steps: []step{insert("/b.iso"), insert("/a.iso")}, want: cdState{Image: "/a.iso", Inserted: true, WriteProtected: true}, served: []string{"/b.iso", "/a.iso"}},
		"eject":            {steps: []step{insert("/a.iso"), eject}, served: []string{"/a.iso"}},
		"eject when empty": {steps: []step{eject}},
		"image not found": {
			steps:   []step{insert("/missing.img")},
			served:  []string{"/missing.img"},
			code:    proto.DriverError,
			message: "insert media Cd: HTTP 400: Cannot download virtual media: got error 404 from the server",
		},
		"insert a file": {
			steps:   []step{func(ctx context.Context, d bmc.Driver, _ string) error { return d.Insert(ctx, "/srv/images/x.iso") }},
			code:    proto.InvalidConfig,
			message: "not an http or https URL",
		},
		"insert without virtual media": {noMedia: true, steps: []step{insert("/a.iso")}, code: proto.Unsupported, message: "offers no virtual CD/DVD"},
		"eject without virtual media":  {noMedia: true, steps: []step{eject}, code: proto.Unsupported, message: "offers no virtual CD/DVD"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := redfishtest.Start(t, redfishtest.Config{NoVirtualMedia: tc.noMedia})
			im := newImages(t)
			d := openSushy(t, sushyConfig(t, e))
			var err error
			for _, step := range tc.steps {
				if err = step(context.Background(), d, im.URL); err != nil {
					break
				}
			}
			checkErr(t, err, tc.code, tc.message)
			if diff := cmp.Diff(tc.served, im.Served()); diff != "" {
				t.Errorf("images served (-want +got):\n%s", diff)
			}
			if tc.noMedia {
				return
			}
			var got cdState
			e.Get(t, "/redfish/v1/Systems/"+redfishtest.SystemID+"/VirtualMedia/Cd", &got)
			got.Image = strings.TrimPrefix(got.Image, im.URL)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("virtual CD (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSushyInspect: the emulator links a Memory collection it answers 404 for; the
// inventory holds what it does serve and names memory as unread.
func TestSushyInspect(t *testing.T) {
	e := redfishtest.Start(t, redfishtest.Config{PowerState: "On"})
	d := openSushy(t, sushyConfig(t, e))
	got, err := d.Inspect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	memory := "/redfish/v1/Systems/" + redfishtest.SystemID + "/Memory"
	want := proto.OOBInventory{
		System:     proto.OOBSystem{Manufacturer: "Sushy Emulator", UUID: redfishtest.SystemID},
		PowerState: proto.PowerStateOn,
		NICs:       []proto.OOBNIC{{Name: redfishtest.MAC, MAC: strings.ToLower(redfishtest.MAC)}},
		BMC:        proto.OOBController{Model: "Joo Janta 200", FirmwareVersion: "1.00"},
		Unread:     []proto.OOBUnread{{Part: "memory", Error: "redfish " + e.Address + ": read memory: " + memory + ": HTTP 404: 404 Not Found: The requested URL was not found on the server. If you entered the URL manually please check your spelling and try again."}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("inventory (-want +got):\n%s", diff)
	}
}

// TestSushyWalk: one driver takes a machine through what a deploy asks of its BMC, each
// step against the state the one before left: inspect, network boot once, media, a
// restart, the disk for good, off.
func TestSushyWalk(t *testing.T) {
	t.Parallel()
	e := redfishtest.Start(t, redfishtest.Config{})
	im := newImages(t)
	d := openSushy(t, sushyConfig(t, e))
	ctx := context.Background()
	// The emulator keeps every override, Continuous, in UEFI mode.
	state := func(power, target string) redfishtest.System {
		return redfishtest.System{PowerState: power, Boot: redfishtest.Boot{BootSourceOverrideTarget: target, BootSourceOverrideEnabled: "Continuous", BootSourceOverrideMode: "UEFI"}}
	}
	steps := []struct {
		name string
		do   func() error
		want redfishtest.System
	}{
		{"inspect", func() error { _, err := d.Inspect(ctx); return err }, state("Off", "Hdd")},
		{"pxe once", func() error { return d.SetBootDevice(ctx, proto.BootDevicePXE, false) }, state("Off", "Pxe")},
		{"on", func() error { return d.SetPower(ctx, proto.PowerActionOn) }, state("On", "Pxe")},
		{"insert", func() error { return d.Insert(ctx, im.URL+"/ramdisk.iso") }, state("On", "Pxe")},
		{"cd once", func() error { return d.SetBootDevice(ctx, proto.BootDeviceCD, false) }, state("On", "Cd")},
		{"cycle", func() error { return d.SetPower(ctx, proto.PowerActionCycle) }, state("On", "Cd")},
		{"eject", func() error { return d.Eject(ctx) }, state("On", "Cd")},
		{"disk persistent", func() error { return d.SetBootDevice(ctx, proto.BootDeviceDisk, true) }, state("On", "Hdd")},
		{"reset", func() error { return d.SetPower(ctx, proto.PowerActionReset) }, state("On", "Hdd")},
		{"graceful-off", func() error { return d.SetPower(ctx, proto.PowerActionGracefulOff) }, state("Off", "Hdd")},
	}
	for _, step := range steps {
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if diff := cmp.Diff(step.want, e.System(t)); diff != "" {
			t.Fatalf("after %s (-want +got):\n%s", step.name, diff)
		}
	}
	if got, want := resets(t, e), 5; got != want {
		t.Errorf("%d resets, want %d (on, cycle as ForceOff and On, reset, graceful-off)", got, want)
	}
	if diff := cmp.Diff([]string{"/ramdisk.iso"}, im.Served()); diff != "" {
		t.Errorf("images served (-want +got):\n%s", diff)
	}
}
