package qmp

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/better-compute/better-compute/bmc"
	"github.com/better-compute/better-compute/proto"
)

// Name is the driver's name in bindings and hardware profiles.
const Name = proto.BMCDriverQMP

// The options naming the VM's boot devices by their qdev id (-device ...,id=ID).
const (
	optNIC  = "nic"
	optDisk = "disk"
	optCD   = "cd"
)

// qdevID is what qemu accepts as a device id.
var qdevID = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9._-]{0,127}$`)

// driver is one VM's QMP socket. It connects for each operation, since a QMP socket
// serves one client at a time.
type driver struct {
	socket string
	// devices are the managed boot devices' ids by option, in the order nic, disk, cd.
	devices []device
	timing  bmc.Timing
	log     *slog.Logger
	mu      sync.Mutex
}

// device is a managed boot device.
type device struct {
	option, id string
}

// Open checks cfg and the VM: its socket (cfg.Address, /PATH or unix:/PATH) must
// answer QMP and each device the options name must exist.
func Open(ctx context.Context, cfg bmc.Config, env bmc.Env) (bmc.Driver, error) {
	if err := bmc.CheckOptions(cfg.Options, optNIC, optDisk, optCD, proto.BMCOptionPowerTimeout, "pollInterval"); err != nil {
		return nil, err
	}
	socket := strings.TrimPrefix(cfg.Address, "unix:")
	if !filepath.IsAbs(socket) {
		return nil, proto.Errorf(proto.InvalidConfig, "address %q is not a QMP socket's absolute path (/PATH or unix:/PATH)", cfg.Address).WithPath("address")
	}
	if cfg.CredentialRef != "" {
		return nil, proto.Errorf(proto.InvalidConfig, "a QMP socket takes no credential: its file mode guards it").WithPath("credentialRef")
	}
	timing, err := bmc.TimingOptions(cfg.Options)
	if err != nil {
		return nil, err
	}
	d := &driver{socket: socket, timing: timing, log: env.Logger().With("bmc", socket, "driver", Name)}
	for _, opt := range []string{optNIC, optDisk, optCD} {
		id, ok := cfg.Options[opt]
		if !ok {
			continue
		}
		if !qdevID.MatchString(id) {
			return nil, proto.Errorf(proto.InvalidConfig, "option %s %q is not a qemu device id", opt, id).WithPath("options." + opt)
		}
		d.devices = append(d.devices, device{option: opt, id: id})
	}
	err = d.session(ctx, "check devices", func(c *conn) error {
		for _, dev := range d.devices {
			if _, err := bootIndex(c, dev.id); err != nil {
				return proto.Errorf(proto.InvalidConfig, "option %s: the VM has no device %q with a bootindex: %v", dev.option, dev.id, err).WithPath("options." + dev.option)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// Close does nothing: sessions end with each operation.
func (d *driver) Close() error { return nil }

// session runs op over a fresh QMP session, turning its failures into the project's
// errors: TIMEOUT when ctx ran out, else DRIVER_ERROR with qemu's own message.
func (d *driver) session(ctx context.Context, what string, op func(*conn) error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, err := dial(ctx, d.socket)
	if err == nil {
		err = op(c)
		c.close()
	}
	switch _, own := errors.AsType[*proto.Error](err); {
	case err == nil, own:
		return err
	case bmc.Expired(ctx):
		return proto.Errorf(proto.Timeout, "qmp %s: %s: %v", d.socket, what, err)
	default:
		return proto.Errorf(proto.DriverError, "qmp %s: %s: %v", d.socket, what, err)
	}
}

// option returns the id of the device an option names, or UNSUPPORTED.
func (d *driver) option(opt, what string) (string, error) {
	for _, dev := range d.devices {
		if dev.option == opt {
			return dev.id, nil
		}
	}
	return "", proto.Errorf(proto.Unsupported, "qmp %s: the binding names no %s (option %s)", d.socket, what, opt)
}
