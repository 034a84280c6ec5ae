package redfish

import (
	"context"
	"net/url"
	"slices"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"
)

// cd finds the virtual CD/DVD: the first VirtualMedia whose MediaTypes hold CD or DVD,
// under the managers of the system, then under the system itself. Having none is
// UNSUPPORTED.
func (d *driver) cd(ctx context.Context) (*schemas.VirtualMedia, error) {
	sys, err := d.system(ctx)
	if err != nil {
		return nil, err
	}
	managers, err := sys.ManagedBy()
	if err != nil {
		return nil, d.fail(ctx, "read the system's managers", err)
	}
	var all []*schemas.VirtualMedia
	for _, m := range managers {
		media, err := m.VirtualMedia()
		if err != nil {
			return nil, d.fail(ctx, "list the virtual media of manager "+clipName(m.ID), err)
		}
		all = append(all, media...)
	}
	media, err := sys.VirtualMedia()
	if err != nil {
		return nil, d.fail(ctx, "list the system's virtual media", err)
	}
	for _, vm := range append(all, media...) {
		if slices.Contains(vm.MediaTypes, schemas.CDVirtualMediaType) || slices.Contains(vm.MediaTypes, schemas.DVDVirtualMediaType) {
			return vm, nil
		}
	}
	return nil, proto.Errorf(proto.Unsupported, "redfish %s: the BMC offers no virtual CD/DVD", d.host)
}

// Insert mounts the image at url (http or https) write-protected with InsertMedia,
// ejecting another image first, and waits until the BMC shows it inserted.
func (d *driver) Insert(ctx context.Context, image string) error {
	if u, err := url.Parse(image); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return proto.Errorf(proto.InvalidConfig, "virtual media image %q is not an http or https URL", image).WithPath("url")
	}
	vm, err := d.cd(ctx)
	if err != nil {
		return err
	}
	if gofish.Deref(vm.Inserted) && vm.Image == image {
		return nil
	}
	if gofish.Deref(vm.Inserted) {
		if err := d.eject(ctx, vm); err != nil {
			return err
		}
	}
	d.log.Info("insert media", "media", mediaName(vm), "image", image)
	_, err = vm.InsertMedia(&schemas.VirtualMediaInsertMediaParameters{
		Image:          image,
		Inserted:       gofish.ToRef(true),
		WriteProtected: gofish.ToRef(true),
	})
	if err != nil {
		return d.fail(ctx, "insert media "+mediaName(vm), err)
	}
	return d.waitMedia(ctx, vm, func(vm *schemas.VirtualMedia) bool {
		return gofish.Deref(vm.Inserted) && vm.Image == image
	})
}

// Eject ejects the inserted image, if any, and waits until the BMC shows none.
func (d *driver) Eject(ctx context.Context) error {
	vm, err := d.cd(ctx)
	if err != nil {
		return err
	}
	if !gofish.Deref(vm.Inserted) && vm.Image == "" {
		return nil
	}
	return d.eject(ctx, vm)
}

func (d *driver) eject(ctx context.Context, vm *schemas.VirtualMedia) error {
	d.log.Info("eject media", "media", mediaName(vm), "image", vm.Image)
	if _, err := vm.EjectMedia(); err != nil {
		return d.fail(ctx, "eject media "+mediaName(vm), err)
	}
	return d.waitMedia(ctx, vm, func(vm *schemas.VirtualMedia) bool { return !gofish.Deref(vm.Inserted) })
}

// waitMedia rereads the virtual medium until done holds, for BMCs that answer an
// insert or eject before it has happened.
func (d *driver) waitMedia(ctx context.Context, vm *schemas.VirtualMedia, done func(*schemas.VirtualMedia) bool) error {
	name := mediaName(vm)
	ctx, cancel := context.WithTimeout(ctx, d.timing.Timeout)
	defer cancel()
	for {
		d.reads.newRead()
		now, err := schemas.GetVirtualMedia(d.client.WithContext(ctx), vm.ODataID)
		if err != nil {
			return d.fail(ctx, "read virtual media "+name, err)
		}
		if done(now) {
			return nil
		}
		if clock.Sleep(ctx, clock.Real{}, d.timing.Interval) != nil {
			return proto.Errorf(proto.Timeout, "redfish %s: virtual media %s still shows inserted %v, image %q", d.host, name, gofish.Deref(now.Inserted), clip(now.Image))
		}
	}
}

// mediaName names a virtual medium in messages: by its Id, else by its @odata.id, which
// a BMC that leaves the Id out still gives; either clipped, being the BMC's text.
func mediaName(vm *schemas.VirtualMedia) string {
	switch {
	case vm.ID != "":
		return clipName(vm.ID)
	case vm.ODataID != "":
		return clipName(vm.ODataID)
	}
	return "(no Id or @odata.id)"
}
